// goprint prints the Unicode version of this Go toolchain, then every run of code points at or
// above U+0080 that unicode.IsPrint accepts, one "first last" pair (hex) per line: the table
// behind strconv.Quote (%q), which protocol/_goprint.py must equal.
package main

import (
	"fmt"
	"unicode"
)

func main() {
	fmt.Println(unicode.Version)
	start := rune(-1)
	for r := rune(0x80); r <= unicode.MaxRune+1; r++ {
		printable := r <= unicode.MaxRune && unicode.IsPrint(r)
		if printable && start < 0 {
			start = r
		} else if !printable && start >= 0 {
			fmt.Printf("%x %x\n", start, r-1)
			start = -1
		}
	}
}
