module pnsq.test/interop

go 1.24

require (
	github.com/nsqio/go-nsq v1.1.0
	github.com/spaolacci/murmur3 v1.1.0
)

require github.com/golang/snappy v0.0.1 // indirect
