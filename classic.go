package rbloom

import (
	"context"
	"errors"
	"fmt"
)

// Classic is a classic Bloom filter in Redis: one bit per slot, no Remove.
// For the same capacity and error rate it takes a quarter of the memory of
// a Counting filter. It has every method of Filter, and Resize; its Remove
// methods fail. It is safe for concurrent use by multiple goroutines.
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

// errNoRemove is the error of a classic filter's Remove methods.
var errNoRemove = fmt.Errorf("a classic filter cannot remove (rebuild it from its source to forget items): %w", errors.ErrUnsupported)

// RemoveMany fails with an error wrapping errors.ErrUnsupported, writing
// nothing: a bit may be shared by other items, so clearing it could make
// them test absent.
func (c *Classic) RemoveMany(ctx context.Context, items []string) ([]bool, error) {
	return observe(ctx, c.f.obs, c.callOf("RemoveMany", len(items)), func(context.Context) ([]bool, error) {
		return nil, callError("remove", errNoRemove)
	})
}

// Remove fails as RemoveMany does.
func (c *Classic) Remove(ctx context.Context, item string) (bool, error) {
	return first(c.RemoveMany(ctx, []string{item}))
}

// RemoveManyOnce fails as RemoveMany does.
func (c *Classic) RemoveManyOnce(ctx context.Context, items []string, opID string) ([]bool, error) {
	return observe(ctx, c.f.obs, c.callOf("RemoveManyOnce", len(items)), func(context.Context) ([]bool, error) {
		return nil, callError("remove", errNoRemove)
	})
}

// RemoveOnce fails as RemoveMany does.
func (c *Classic) RemoveOnce(ctx context.Context, item, opID string) (bool, error) {
	return first(c.RemoveManyOnce(ctx, []string{item}, opID))
}

// CountMany returns for each item 1 when all its k bits are set (it may
// be present), 0 when it is definitely absent.
func (c *Classic) CountMany(ctx context.Context, items []string) ([]int, error) {
	return observe(ctx, c.f.obs, c.callOf("CountMany", len(items)), func(ctx context.Context) ([]int, error) {
		return followRead(ctx, &c.base, func(f *filter) ([]int, error) { return f.count(ctx, items) })
	})
}

// Count is CountMany of one item.
func (c *Classic) Count(ctx context.Context, item string) (int, error) {
	return first(c.CountMany(ctx, []string{item}))
}
