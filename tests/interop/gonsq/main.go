// Command gonsq-interop drives the real go-nsq client (Producer and Consumer) against an nsqd so
// that pnsq's Python test-suite can check interoperability from a subprocess.
//
// Every result is a JSON object on its own line on stdout; logging goes to stderr. Subcommands:
//
//	gonsq-interop pub -nsqd HOST:PORT -topic T -count N -mode pub|mpub|dpub [flags]
//	gonsq-interop sub -nsqd HOST:PORT -topic T -channel C -count N [flags]
//
// Run a subcommand with -h for its flags.
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"

	"github.com/nsqio/go-nsq"
)

func usage() {
	fmt.Fprintf(os.Stderr, "usage: %s pub|sub [flags]   (%s <subcommand> -h for flags)\n",
		os.Args[0], os.Args[0])
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetOutput(os.Stderr)
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var code int
	switch os.Args[1] {
	case "pub":
		code = runPub(os.Args[2:])
	case "sub":
		code = runSub(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "unknown subcommand %q\n", os.Args[1])
		usage()
		code = 2
	}
	os.Exit(code)
}

// stdout is shared by the handler goroutine and the main goroutine; each JSON line is written
// whole under this lock so lines never interleave.
var stdoutMu sync.Mutex

// emit writes v as one JSON line on stdout.
func emit(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		log.Printf("cannot encode result: %v", err)
		return
	}
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

// parseLogLevel maps a user-facing level name onto go-nsq's levels.
func parseLogLevel(s string) (nsq.LogLevel, error) {
	switch strings.ToLower(s) {
	case "debug", "dbg":
		return nsq.LogLevelDebug, nil
	case "info", "inf":
		return nsq.LogLevelInfo, nil
	case "warn", "warning", "wrn":
		return nsq.LogLevelWarning, nil
	case "error", "err":
		return nsq.LogLevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
}

// levelTags are the prefixes go-nsq puts at the start of each log line (LogLevel.String()).
var levelTags = map[string]nsq.LogLevel{
	"DBG": nsq.LogLevelDebug,
	"INF": nsq.LogLevelInfo,
	"WRN": nsq.LogLevelWarning,
	"ERR": nsq.LogLevelError,
}

// hookLogger is handed to go-nsq as its logger. It lets every line go past an optional hook
// (used to count disconnects, whatever the user's level) and prints to stderr only the lines at
// or above the level the user asked for.
type hookLogger struct {
	show nsq.LogLevel
	out  *log.Logger
	hook func(line string)
}

func newHookLogger(show nsq.LogLevel, hook func(string)) *hookLogger {
	return &hookLogger{
		show: show,
		out:  log.New(os.Stderr, "go-nsq ", log.Ltime|log.Lmicroseconds),
		hook: hook,
	}
}

// Output implements go-nsq's logger interface.
func (h *hookLogger) Output(calldepth int, s string) error {
	if h.hook != nil {
		h.hook(s)
	}
	lvl := nsq.LogLevelError
	if len(s) >= 3 {
		if l, ok := levelTags[s[:3]]; ok {
			lvl = l
		}
	}
	if lvl < h.show {
		return nil
	}
	return h.out.Output(calldepth+1, s)
}

// libLevel is the level to configure inside go-nsq: low enough that the hook sees warnings
// (disconnect notices are logged at warning level), and lower still if the user wants more.
func libLevel(user nsq.LogLevel) nsq.LogLevel {
	if user < nsq.LogLevelWarning {
		return user
	}
	return nsq.LogLevelWarning
}
