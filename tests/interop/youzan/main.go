// Command yzgonsq-interop is a partition-aware NSQ client that behaves as youzan's go-nsq does
// (github.com/youzan/go-nsq, "1.7.12 HA"), so that pnsq's Python test-suite can check a pnsq
// cluster the way youzan's clients use it:
//
//   - it finds partitions through nsqlookupd, `GET /lookup?topic=T&access=w|r&metainfo=true`
//     with `Accept: application/vnd.nsq; version=1.0`, and its `partitions` map and
//     `meta.partition_num`;
//   - the producer sends `PUB T <pid>` to each partition's leader, round-robin over the
//     partitions or, with a sharding key, to `murmur3_32(key, seed 0) % partition_num`;
//   - the consumer opens one connection per partition (`SUB T C <pid>` or `SUB_ORDERED T C <pid>`,
//     stripping the 12-byte detail block ordered deliveries carry);
//   - on `E_FAILED_ON_NOT_LEADER`, `E_TOPIC_NOT_EXIST` or `E_FAILED_ON_NOT_WRITABLE` it drops
//     that partition's connection and looks the topic up again (the producer retries a publish
//     up to 3 times, as youzan's synchronous publish does).
//
// youzan's module itself is not served by the Go module proxy this project builds from, so this
// program re-creates the client's wire behaviour (documented in youzan-nsq.md §11) on top of
// nsqio go-nsq's Conn, which does the V2 framing, IDENTIFY, heartbeats and FIN for it.
//
// Every result is a JSON object on its own line on stdout; logging goes to stderr. Subcommands:
//
//	yzgonsq-interop pub -lookupd HOST:PORT -topic T -count N [-keys K]
//	yzgonsq-interop sub -lookupd HOST:PORT -topic T -channel C -count N [-ordered]
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
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

// stdoutMu keeps each JSON line whole when several goroutines emit.
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

// leaderGone reports whether an error frame is one of those after which youzan's go-nsq drops
// the partition's connection and looks the topic up again.
func leaderGone(frame string) bool {
	for _, code := range []string{"E_FAILED_ON_NOT_LEADER", "E_TOPIC_NOT_EXIST", "E_FAILED_ON_NOT_WRITABLE"} {
		if strings.HasPrefix(frame, code) {
			return true
		}
	}
	return false
}
