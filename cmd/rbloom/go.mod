module github.com/rbloom/rbloom/cmd/rbloom

go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/rbloom/rbloom v0.0.0-00010101000000-000000000000
	github.com/rbloom/rbloom/internal/bench v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/spf13/pflag v1.0.10
	golang.org/x/term v0.44.0
)

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/spaolacci/murmur3 v1.1.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/rbloom/rbloom => ../..

replace github.com/rbloom/rbloom/internal/bench => ../../internal/bench
