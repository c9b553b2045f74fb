package rbloom

// Classic is a classic Bloom filter in Redis: one bit per slot, no Remove.
// For the same capacity and error rate it takes a quarter of the memory of
// a Counting filter. It has every method of Filter, and Resize. It is safe
// for concurrent use by multiple goroutines.
type Classic struct{ base }

var _ Filter = (*Classic)(nil)

// NewClassic returns the classic filter called name, sized by o, in the
// Redis that rdb reaches. Like NewCounting, it does not contact Redis.
func NewClassic(rdb Client, name string, o Options) (*Classic, error) {
	f, err := newFilter(rdb, name, ModeClassic, o)
	if err != nil {
		return nil, callError("new classic", err)
	}
	return &Classic{base{f}}, nil
}
