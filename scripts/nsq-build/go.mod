// The Go module manifest scripts/install-nsq builds the reference NSQ binaries from.
// It pins NSQ v1.3.0 and repeats the replace directive of v1.3.0's own go.mod,
// which `go install pkg@version` cannot honour.
module nsqtools/nsq-build

go 1.24

require github.com/nsqio/nsq v1.3.0 // indirect

require (
	github.com/BurntSushi/toml v1.3.2 // indirect
	github.com/bitly/go-hostpool v0.1.0 // indirect
	github.com/bitly/timer_metrics v1.0.0 // indirect
	github.com/blang/semver v3.5.1+incompatible // indirect
	github.com/bmizerany/perks v0.0.0-20141205001514-d9a9656a3a4b // indirect
	github.com/golang/snappy v0.0.4 // indirect
	github.com/judwhite/go-svc v1.2.1 // indirect
	github.com/julienschmidt/httprouter v1.3.0 // indirect
	github.com/mreiferson/go-options v1.0.0 // indirect
	github.com/nsqio/go-diskqueue v1.1.0 // indirect
	github.com/nsqio/go-nsq v1.1.0 // indirect
	golang.org/x/sys v0.10.0 // indirect
)

replace github.com/judwhite/go-svc => github.com/mreiferson/go-svc v1.2.2-0.20210815184239-7a96e00010f6

tool (
	github.com/nsqio/nsq/apps/nsq_stat
	github.com/nsqio/nsq/apps/nsq_tail
	github.com/nsqio/nsq/apps/nsq_to_file
	github.com/nsqio/nsq/apps/nsq_to_http
	github.com/nsqio/nsq/apps/nsq_to_nsq
	github.com/nsqio/nsq/apps/nsqadmin
	github.com/nsqio/nsq/apps/nsqd
	github.com/nsqio/nsq/apps/nsqlookupd
	github.com/nsqio/nsq/apps/to_nsq
	github.com/nsqio/nsq/bench/bench_reader
	github.com/nsqio/nsq/bench/bench_writer
)
