package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/rbloom/rbloom"
)

// sizing holds the flags that size a filter. create needs them; add and
// load take them too, to create the filter they write to when it is missing.
type sizing struct {
	fs      *pflag.FlagSet
	opts    rbloom.Options
	classic bool
	cuckoo  bool
}

func addSizingFlags(fs *pflag.FlagSet) *sizing {
	s := &sizing{fs: fs}
	// Counts take 1000000, 1_000_000 or 1e6; the rate 0.01, 1% or 1e-3.
	fs.Var(newWhole(&s.opts.Capacity, 0, 1), "capacity", "number of items `N` the filter is sized for: 1000000, 1_000_000 or 1e6")
	fs.Var(newRate(&s.opts.ErrorRate, rbloom.DefaultErrorRate), "error-rate", "false-positive rate `P` wanted at capacity: 0.01, 1% or 1e-3")
	fs.VarP(newWhole(&s.opts.Slots, 0, 1), "slots", "m", "number of slots `M`, instead of deriving it from --capacity")
	fs.VarP(newWhole(&s.opts.Hashes, 0, 1), "hashes", "k", "slots per item `K`, instead of deriving it")
	fs.Var(newWhole(&s.opts.Partitions, 0, 1), "partitions", "Redis keys `P` to split the slots over (default: enough for 64 MiB each)")
	fs.BoolVar(&s.classic, "classic", false, "a classic filter: one bit per slot, a quarter of the memory, no remove")
	fs.BoolVar(&s.cuckoo, "cuckoo", false, "a cuckoo filter: remove in about a quarter of the memory, but adds fail once it is full (-m counts buckets, -k is the fingerprint width)")
	fs.DurationVar(&s.opts.TTL, "ttl", 0, "expire the filter `D` after it is created (e.g. 24h; default never)")
	return s
}

// given reports whether the flags describe a filter, as opposed to naming
// one that exists. It fails when they only half describe one.
func (s *sizing) given() (bool, error) {
	m, k := s.fs.Changed("slots"), s.fs.Changed("hashes")
	sized := s.fs.Changed("capacity") || m || k
	if s.classic && s.cuckoo {
		return false, errors.New("--classic and --cuckoo: a filter is one or the other")
	}
	if m != k && !s.fs.Changed("capacity") {
		return false, errors.New("-m and -k go together, unless --capacity is given to derive the other")
	}
	if !sized {
		for _, name := range []string{"error-rate", "partitions", "classic", "cuckoo", "ttl"} {
			if s.fs.Changed(name) {
				return false, fmt.Errorf("--%s needs --capacity N, or -m M and -k K", name)
			}
		}
	}
	return sized, nil
}

// resized returns the sizing the flags give a resize: the error rate, when
// not given with -m and -k, is left to derive from them, as for filter.
func (s *sizing) resized() rbloom.Options {
	o := s.opts
	if !s.fs.Changed("error-rate") && (o.Slots != 0 || o.Hashes != 0) {
		o.ErrorRate = 0
	}
	return o
}

// filter returns the filter that the flags describe.
func (s *sizing) filter(c *cli, name string) (rbloom.Filter, error) {
	return s.handle(c, name, s.opts)
}

// handle returns the filter that the flags describe, with o's settings.
func (s *sizing) handle(c *cli, name string, o rbloom.Options) (rbloom.Filter, error) {
	if !s.fs.Changed("error-rate") && (o.Slots != 0 || o.Hashes != 0) {
		// With m or k given, the library records the rate they give at
		// capacity rather than a target nobody asked for.
		o.ErrorRate = 0
	}
	switch {
	case s.classic:
		return rbloom.NewClassic(c.rdb, name, o)
	case s.cuckoo:
		return rbloom.NewCuckoo(c.rdb, name, o)
	}
	return rbloom.NewCounting(c.rdb, name, o)
}

// open returns the filter called name as stored in Redis.
func (c *cli) open(ctx context.Context, name string) (rbloom.Filter, error) {
	f, err := rbloom.Open(ctx, c.rdb, name, rbloom.Options{})
	if errors.Is(err, rbloom.ErrNotFound) {
		return nil, fmt.Errorf("no filter named %q (create it with: rbloom create %s --capacity N)", name, name)
	}
	return f, err
}

// removable is a filter that can remove items: a counting or a cuckoo one.
type removable interface {
	rbloom.Filter
	RemoveMany(ctx context.Context, items []string) ([]bool, error)
	Count(ctx context.Context, item string) (int, error)
}

// openCounting is open for the commands that only a counting or a cuckoo
// filter can do.
func (c *cli) openCounting(ctx context.Context, name, what string) (removable, error) {
	f, err := c.open(ctx, name)
	if err != nil {
		return nil, err
	}
	cf, ok := f.(removable)
	if _, classic := f.(*rbloom.Classic); classic || !ok {
		return nil, fmt.Errorf("%s is a classic filter, which cannot %s: only counting and cuckoo filters can", name, what)
	}
	return cf, nil
}

// openForWrite is open for add and load: with sizing flags it returns the
// filter they describe, which the first write creates if it is missing
// (the flags say what to make: Options.CreateOnWrite) and which must match
// the stored one if not.
func (c *cli) openForWrite(ctx context.Context, name string, s *sizing) (rbloom.Filter, error) {
	sized, err := s.given()
	if err != nil {
		return nil, err
	}
	if sized {
		o := s.opts
		o.CreateOnWrite = true
		f, err := s.handle(c, name, o)
		return sizedFilter{f}, err
	}
	f, err := rbloom.Open(ctx, c.rdb, name, rbloom.Options{})
	if errors.Is(err, rbloom.ErrNotFound) {
		return nil, fmt.Errorf("no filter named %q: create it with 'rbloom create %s --capacity N', or give --capacity N here", name, name)
	}
	return f, err
}

// sizedFilter is a filter made from the sizing flags. Its writes fail
// with a hint when the stored filter has other parameters.
type sizedFilter struct{ rbloom.Filter }

func (f sizedFilter) AddMany(ctx context.Context, items []string) ([]bool, error) {
	res, err := f.Filter.AddMany(ctx, items)
	if errors.Is(err, rbloom.ErrParamsMismatch) {
		err = fmt.Errorf("%w; leave out the sizing flags to use the stored filter", err)
	}
	return res, err
}

func setupCreate(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	s := addSizingFlags(fs)
	return func(ctx context.Context, args []string) error {
		name := args[0]
		sized, err := s.given()
		if err != nil {
			return err
		}
		if !sized {
			return errors.New("give --capacity N (and --error-rate P), or -m M and -k K")
		}
		f, err := s.filter(c, name)
		if err != nil {
			return err
		}
		// Info first, to tell the user whether create made the filter:
		// Create itself succeeds either way when the parameters match.
		before, err := f.Info(ctx)
		if err != nil {
			return err
		}
		if err := f.Create(ctx); err != nil {
			return err
		}
		in, err := f.Info(ctx)
		if err != nil {
			return err
		}
		said := "created " + name
		if before.Exists {
			said = name + " exists already"
		}
		fmt.Fprintf(c.out, "%s: %s\n", said, describe(in))
		return nil
	}
}

// describe sums up a filter in one line.
func describe(in *rbloom.Info) string {
	s := fmt.Sprintf("%s, m=%d k=%d", in.Mode, in.Slots, in.Hashes)
	if len(in.Partitions) > 1 {
		s += fmt.Sprintf(" in %d partitions", len(in.Partitions))
	}
	if in.Capacity > 0 {
		s += fmt.Sprintf(", for %d items at error rate %s", in.Capacity, percent(in.ErrorRate))
	}
	s += ", " + bytesIEC(in.Bytes) + " in Redis"
	if in.TTL > 0 {
		s += ", expires in " + in.TTL.Round(time.Second).String()
	}
	return s
}

// percent formats a rate such as 0.01 as "1%", with 3 significant digits.
func percent(p float64) string {
	return strconv.FormatFloat(100*p, 'g', 3, 64) + "%"
}

// bytesIEC formats n bytes for people: "512 B", "4.6 MiB".
func bytesIEC(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

func setupInfo(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		f, err := c.open(ctx, args[0])
		if err != nil {
			return err
		}
		in, err := f.Info(ctx)
		if err != nil {
			return err
		}
		if !in.Exists { // dropped since open
			return fmt.Errorf("no filter named %q", args[0])
		}
		if *asJSON {
			err = printInfoJSON(c, in)
		} else {
			printInfo(c, in)
		}
		warnOverfull(c, in)
		warnEviction(c, in)
		return err
	}
}

func printInfo(c *cli, in *rbloom.Info) {
	ttl := "never"
	if in.TTL > 0 {
		ttl = "in " + in.TTL.Round(time.Second).String()
	}
	capacity := "unknown (sized by m and k)"
	if in.Capacity > 0 {
		capacity = fmt.Sprintf("%d items at error rate %s", in.Capacity, percent(in.ErrorRate))
	}
	for _, row := range [][2]string{
		{"name", in.Name},
		{"partitions", partitions(in)},
		{"mode", in.Mode.String()},
		{"slots (m)", strconv.FormatUint(in.Slots, 10)},
		{"hashes (k)", strconv.Itoa(in.Hashes)},
		{"sized for", capacity},
		{"items", fmt.Sprintf("%d (added minus removed, approximate)", in.Items)},
		{"memory", fmt.Sprintf("%d bytes (%s)", in.Bytes, bytesIEC(in.Bytes))},
		{"expires", ttl},
		{"error rate now", percent(in.FalsePositiveRate) + " expected from the items, " +
			percent(in.MeasuredFalsePositiveRate) + " measured from the slots"},
		{"slots in use", slotsInUse(in)},
		{"damaged", strconv.FormatBool(in.Damaged)},
		{"eviction", evictionRow(in)},
	} {
		fmt.Fprintf(c.out, "%-15s %s\n", row[0]+":", row[1])
	}
	if in.Mode == rbloom.ModeCuckoo {
		fmt.Fprintf(c.out, "%-15s %.3f of the slots (adds fail with ErrFull past %g)\n", "load:", in.Load, rbloom.CuckooMaxLoad)
	}
	if in.Loading {
		fmt.Fprintf(c.out, "%-15s %s\n", "loading:", loadingRow(in))
	}
}

// loadingRow says who loads a filter being loaded, and what to do.
func loadingRow(in *rbloom.Info) string {
	if in.Rebuilding {
		return "true: reads fail with ErrLoading until the load is over"
	}
	return "true, and nobody is loading it (the load died): run rbloom rebuild " + in.Name + " FILE"
}

// evictionRow says what the server's maxmemory-policy means for the filter.
func evictionRow(in *rbloom.Info) string {
	switch {
	case in.EvictionPolicy == "":
		return "unknown (the server does not report its maxmemory-policy)"
	case in.Evicts():
		return in.EvictionPolicy + ": records or partitions may be evicted"
	}
	return in.EvictionPolicy + ": never evicted"
}

// warnOverfull prints to stderr, when the filter holds more than it was
// sized for, what that costs and how to fix it.
func warnOverfull(c *cli, in *rbloom.Info) {
	if !in.Overfull() {
		return
	}
	if in.Mode == rbloom.ModeCuckoo {
		fmt.Fprintf(c.stderr, "rbloom: warning: cuckoo filter %s is at load %.3f; past %g its adds fail with ErrFull: resize it without stopping it (rbloom rebuild %s ITEMS-FILE --capacity %d)\n",
			in.Name, in.Load, rbloom.CuckooMaxLoad, in.Name, max(2*in.Items, 1000))
		return
	}
	fmt.Fprintf(c.stderr, "rbloom: warning: %s holds %d items for a capacity of %d (%.1fx); its false-positive rate is %s against a target of %s: resize it without stopping it (rbloom rebuild %s ITEMS-FILE --capacity %d)\n",
		in.Name, in.Items, in.Capacity, in.Fill, percent(in.MeasuredFalsePositiveRate), percent(in.ErrorRate), in.Name, max(2*in.Items, 1000))
}

// warnEviction prints to stderr, when the server may evict keys, what
// that risks.
func warnEviction(c *cli, in *rbloom.Info) {
	if !in.Evicts() {
		return
	}
	fmt.Fprintf(c.stderr, "rbloom: warning: the server's maxmemory-policy is %s: it may evict the filter's operation records (a replayed id would then apply twice) or its partitions; set maxmemory-policy noeviction\n",
		in.EvictionPolicy)
}

// partitions sums up the filter's keys: one of them would do to find it
// in Redis, and info --json lists all.
func partitions(in *rbloom.Info) string {
	switch len(in.Partitions) {
	case 0:
		return "0"
	case 1:
		return "1, key " + in.Partitions[0].Key
	}
	return fmt.Sprintf("%d, keys %s and %d more (info --json lists them)", len(in.Partitions), in.Partitions[0].Key, len(in.Partitions)-1)
}

// infoJSON is the shape of info --json: rbloom.Info with names and units
// fit for jq.
type infoJSON struct {
	Name              string  `json:"name"`
	Mode              string  `json:"mode"` // "counting" or "classic"
	Slots             uint64  `json:"slots"`
	Hashes            int     `json:"hashes"`
	Capacity          uint64  `json:"capacity"` // 0: unknown
	ErrorRate         float64 `json:"error_rate"`
	Items             int64   `json:"items"`
	Bytes             int64   `json:"bytes"`
	TTLSeconds        float64 `json:"ttl_seconds"` // 0: never expires
	FalsePositiveRate float64 `json:"false_positive_rate"`
	// Measured from the slots: see rbloom.Info.
	MeasuredFalsePositiveRate float64 `json:"measured_false_positive_rate"`
	Fill                      float64 `json:"fill"` // items / capacity
	NonZero                   uint64  `json:"non_zero_slots"`
	Saturated                 uint64  `json:"saturated_counters"`
	Damaged                   bool    `json:"damaged"`
	Loading                   bool    `json:"loading"`
	Rebuilding                bool    `json:"rebuilding"`
	Overfull                  bool    `json:"overfull"`
	// The server's maxmemory-policy ("" when it does not say), and
	// whether it may evict the filter's keys: see rbloom.Info.Evicts.
	EvictionPolicy string          `json:"eviction_policy"`
	Evicts         bool            `json:"evicts"`
	Partitions     []partitionJSON `json:"partitions"`
}

type partitionJSON struct {
	Key        string  `json:"key"`
	Exists     bool    `json:"exists"`
	Items      int64   `json:"items"`
	Bytes      int64   `json:"bytes"`
	TTLSeconds float64 `json:"ttl_seconds"` // 0: never expires
}

func printInfoJSON(c *cli, in *rbloom.Info) error {
	out := infoJSON{
		Name: in.Name, Mode: in.Mode.String(),
		Slots: in.Slots, Hashes: in.Hashes,
		Capacity: in.Capacity, ErrorRate: in.ErrorRate,
		Items: in.Items, Bytes: in.Bytes, TTLSeconds: in.TTL.Seconds(),
		FalsePositiveRate:         in.FalsePositiveRate,
		MeasuredFalsePositiveRate: in.MeasuredFalsePositiveRate,
		Fill:                      in.Fill, NonZero: in.NonZero, Saturated: in.Saturated,
		Damaged: in.Damaged, Loading: in.Loading, Rebuilding: in.Rebuilding, Overfull: in.Overfull(),
		EvictionPolicy: in.EvictionPolicy, Evicts: in.Evicts(),
		Partitions: []partitionJSON{},
	}
	for _, p := range in.Partitions {
		out.Partitions = append(out.Partitions, partitionJSON{
			Key: p.Key, Exists: p.Exists, Items: p.Items, Bytes: p.Bytes, TTLSeconds: p.TTL.Seconds(),
		})
	}
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func setupDrop(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		// Open first, so that drop deletes only an rbloom filter. A filter
		// that is not there is no error, as with DEL: what was asked for
		// is done.
		f, err := rbloom.Open(ctx, c.rdb, args[0], rbloom.Options{})
		if errors.Is(err, rbloom.ErrNotFound) {
			fmt.Fprintf(c.out, "no filter named %s (nothing to drop)\n", printable(args[0]))
			return nil
		}
		if err != nil {
			return err
		}
		if err := f.Drop(ctx); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "dropped %s\n", args[0])
		return nil
	}
}

// slotsInUse says how many slots hold something: counters or bits, or a
// cuckoo filter's fingerprints, 4 to a bucket.
func slotsInUse(in *rbloom.Info) string {
	if in.Mode == rbloom.ModeCuckoo {
		return fmt.Sprintf("%d fingerprints in %d buckets of 4 (%s), %d-bit fingerprints",
			in.NonZero, in.Slots, percent(float64(in.NonZero)/float64(max(1, 4*in.Slots))), in.Hashes)
	}
	return fmt.Sprintf("%d of %d non-zero (%s), %d saturated at 15",
		in.NonZero, in.Slots, percent(float64(in.NonZero)/float64(max(1, in.Slots))), in.Saturated)
}
