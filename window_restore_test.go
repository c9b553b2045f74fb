package rbloom

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// stagedWindow stages the window dump b for the window name, as
// RestoreWindow does up to its install, and returns the restore and the
// restored window's handle.
func stagedWindow(t *testing.T, rdb redis.UniversalClient, name string, b []byte) (*restorer, *Window) {
	t.Helper()
	d := &dumpReader{r: bytes.NewReader(b), crc: crc32.New(castagnoli)}
	h := must(d.header()).on(t)
	g := must(windowOf(rdb, name, WindowOptions{}, h, must(d.windowBlock()).on(t))).on(t)
	rs := &restorer{f: g.f, w: g, token: newToken(), inc: randomIncarnation(), replace: g.drop}
	if err := rs.stage(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := d.trailer(len(g.f.parts)); err != nil {
		t.Fatal(err)
	}
	if err := rs.ringExpiries(ctx); err != nil {
		t.Fatal(err)
	}
	return rs, g
}

// TestWindowRestoreNeverHalf runs a window's restore step by step: from
// the root's install to the root's open, every read and every call of
// the window fails with ErrLoading, writing nothing; once open, every
// event held tests seen.
func TestWindowRestoreNeverHalf(t *testing.T) {
	rdb := realRedis(t)
	w, evs := dumpWindow(t, rdb, "src", "")
	rs, g := stagedWindow(t, rdb, "half", windowDumpOf(t, w))
	var others []int
	for p := range g.f.parts {
		if p != g.root {
			others = append(others, p)
		}
	}
	// Events of the other partitions only: a read of them reads the
	// root's ring too.
	var inOthers []string
	for _, e := range evs {
		if p, _ := g.f.locate(nil, e); p != g.root {
			inOthers = append(inOthers, e)
		}
	}
	refused := func(when string) {
		t.Helper()
		before := dump(t, rdb)
		for _, batch := range [][]string{evs, inOthers, {"never-added"}} {
			if _, err := g.TestMany(ctx, batch); !errors.Is(err, ErrLoading) {
				t.Fatalf("%s: TestMany = %v, want ErrLoading", when, err)
			}
			if _, err := g.TestOrAddMany(ctx, batch); !errors.Is(err, ErrLoading) {
				t.Fatalf("%s: TestOrAddMany = %v, want ErrLoading", when, err)
			}
		}
		if _, err := g.Info(ctx); !errors.Is(err, ErrLoading) {
			t.Fatalf("%s: Info = %v, want ErrLoading", when, err)
		}
		if after := dump(t, rdb); !mapsEqual(before, after) {
			t.Fatalf("%s: a refused call wrote", when)
		}
	}
	if err := rs.stepOn(ctx, "install", []int{g.root}); err != nil {
		t.Fatal(err)
	}
	refused("the root installed")
	if err := rs.stepOn(ctx, "install", others); err != nil {
		t.Fatal(err)
	}
	refused("every ring installed")
	// Sent again (a lost reply), install answers ok.
	if err := rs.step(ctx, "install"); err != nil {
		t.Fatalf("install sent again: %v", err)
	}
	if err := rs.stepOn(ctx, "open", others); err != nil {
		t.Fatal(err)
	}
	refused("every partition open but the root")
	if err := rs.stepOn(ctx, "open", []int{g.root}); err != nil {
		t.Fatal(err)
	}
	if err := rs.step(ctx, "open"); err != nil {
		t.Fatalf("open sent again: %v", err)
	}
	allSeen(t, g, evs)
	if ttl := rdb.PTTL(ctx, g.settingsKey(g.root)).Val(); ttl >= 0 {
		t.Errorf("the root's settings have a TTL of %v once open", ttl)
	}
}

// TestWindowRestoreConcurrentReader reads a window while it is restored,
// again and again: a read fails with ErrNotFound only before the first
// install (the window does not exist yet), then with ErrLoading or
// ErrDamaged, until it answers every event seen; it never answers one
// absent.
func TestWindowRestoreConcurrentReader(t *testing.T) {
	rdb := realRedis(t)
	w, evs := dumpWindow(t, rdb, "src", "")
	b := windowDumpOf(t, w)
	for round := range 5 {
		name := fmt.Sprint("read-", round)
		reader := must(NewWindow(rdb, name, dumpWindowOpts)).on(t)
		var stop atomic.Bool
		var errs, reads int
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			begun := false
			for !stop.Load() {
				seen, err := reader.TestMany(ctx, evs)
				reads++
				if err != nil {
					if errors.Is(err, ErrNotFound) && !begun {
						continue
					}
					if !errors.Is(err, ErrLoading) && !errors.Is(err, ErrDamaged) {
						t.Errorf("TestMany during the restore: %v", err)
						return
					}
					begun, errs = true, errs+1
					continue
				}
				n := 0
				for _, ok := range seen {
					if ok {
						n++
					}
				}
				if n < len(evs) {
					t.Errorf("TestMany during the restore: %d of %d events seen, with no error", n, len(evs))
					return
				}
				begun = true
			}
		}()
		// The dump read slowly, so that the reader runs before and after.
		r, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := RestoreWindow(ctx, rdb, name, WindowOptions{}, r)
			done <- err
		}()
		for i := 0; i < len(b); i += len(b)/7 + 1 {
			must(pw.Write(b[i:min(len(b), i+len(b)/7+1)])).on(t)
			time.Sleep(5 * time.Millisecond)
		}
		pw.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		t.Logf("round %d: %d reads, %d refused", round, reads, errs)
		allSeen(t, reader, evs)
	}
}

// straddleHook holds back the pipelines of a window's read that read its
// root's ring (rootFirst false) or those that do not (rootFirst true)
// until one of the others has been read, then runs, once, between, the
// whole install and open of a restore.
type straddleHook struct {
	rootKey   string
	rootFirst bool
	between   func()
	read      chan struct{} // a pipeline let through was read
	once      sync.Once
}

func (h *straddleHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *straddleHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *straddleHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		root, ring := false, false
		for _, c := range cmds {
			root = root || slices.Contains(c.Args(), any(h.rootKey))
			ring = ring || c.Name() == "getrange"
		}
		if !ring { // a connection's HELLO, say
			return next(ctx, cmds)
		}
		if root == h.rootFirst {
			err := next(ctx, cmds)
			select {
			case h.read <- struct{}{}:
			default:
			}
			return err
		}
		h.once.Do(func() {
			select {
			case <-h.read:
			case <-time.After(2 * time.Second):
			}
			h.between()
		})
		return next(ctx, cmds)
	}
}

// TestWindowReadStraddlingRestore: a read whose pipelines run in parallel
// reads some rings before a restore's install and others after its open.
// The rings read missing exist by then: the read goes again, and answers
// every event seen, never some absent.
func TestWindowReadStraddlingRestore(t *testing.T) {
	rdb := realRedis(t)
	w, evs := dumpWindow(t, rdb, "src", "")
	b := windowDumpOf(t, w)
	for _, rootFirst := range []bool{true, false} {
		// A root read first when it is partition 0, last when 2: the
		// pipelines start in the order of the partitions. A pipeline let
		// through while the restore runs may find a ring installed and
		// not open (ErrLoading, as it should): then again.
		want := 2
		if rootFirst {
			want = 0
		}
		answered := false
		for i := 0; i < 400 && !answered; i++ {
			name := fmt.Sprint("straddle-", i)
			if shareOf(keySlot(name), 3) != want {
				continue
			}
			rs, g := stagedWindow(t, rdb, name, b)
			hook := &straddleHook{rootKey: g.ringKey(g.root), rootFirst: rootFirst, read: make(chan struct{}, 1), between: func() {
				if err := rs.step(ctx, "install"); err != nil {
					t.Error(err)
				}
				if err := rs.step(ctx, "open"); err != nil {
					t.Error(err)
				}
			}}
			c := redis.NewClient(rdb.Options())
			defer c.Close()
			c.AddHook(hook)
			reader := must(NewWindow(c, name, dumpWindowOpts)).on(t)
			seen, err := reader.TestMany(ctx, evs)
			if errors.Is(err, ErrLoading) {
				continue
			}
			if err != nil {
				t.Fatalf("root read first %v: TestMany = %v", rootFirst, err)
			}
			n := 0
			for _, ok := range seen {
				if ok {
					n++
				}
			}
			if n != len(evs) {
				t.Fatalf("root read first %v: %d of %d events seen", rootFirst, n, len(evs))
			}
			answered = true
		}
		if !answered {
			t.Errorf("root read first %v: every read found a ring installed and not open", rootFirst)
		}
	}
}

// TestWindowRestoreRefusesEveryDamage flips every byte of a small
// window's dump and cuts it everywhere: each is ErrBadDump, and no key is
// left.
func TestWindowRestoreRefusesEveryDamage(t *testing.T) {
	rdb := realRedis(t)
	w := created(t, must(NewWindow(rdb, "small", WindowOptions{EventsPerBucket: 10, Bucket: time.Hour, Span: time.Hour, Partitions: 2})).on(t))
	must(w.TestOrAddMany(ctx, []string{"a", "b", "c"})).on(t)
	b := windowDumpOf(t, w)
	before := keysNow(t, rdb)
	try := func(what string, c []byte) {
		t.Helper()
		if _, err := RestoreWindow(ctx, rdb, "small-copy", WindowOptions{}, bytes.NewReader(c)); !errors.Is(err, ErrBadDump) {
			t.Fatalf("%s: RestoreWindow = %v, want ErrBadDump", what, err)
		}
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		try(fmt.Sprintf("bit 0 of byte %d of %d flipped", i, len(b)), c)
		c[i] ^= 0xff
		try(fmt.Sprintf("byte %d of %d inverted", i, len(b)), c)
		try(fmt.Sprintf("cut at %d of %d", i, len(b)), b[:i])
	}
	try("a byte after its end", append(bytes.Clone(b), 0))
	if after := keysNow(t, rdb); !slices.Equal(after, before) {
		t.Fatalf("keys after the refused restores: %v, want %v", after, before)
	}
	g := must(RestoreWindow(ctx, rdb, "small-copy", WindowOptions{}, bytes.NewReader(b))).on(t)
	allSeen(t, g, []string{"a", "b", "c"})
}

// reforgeWindow rewrites the window dump b with edit applied to each
// partition's ring after its header, every checksum made right again.
func reforgeWindow(b []byte, edit func(p int, ring []byte)) []byte {
	crc := func(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
	start := dumpHeadSize + 12 + int(binary.BigEndian.Uint32(b[dumpHeadSize+4:]))
	out := append([]byte(nil), b[:start]...)
	p := 0
	for off := start; string(b[off:off+4]) == sectionMagic; p++ {
		n := int(binary.BigEndian.Uint64(b[off+16:]))
		d := bytes.Clone(b[off+sectionSize : off+sectionSize+n])
		if n > 0 {
			edit(p, d)
		}
		out = append(append(out, b[off:off+sectionSize]...), d...)
		out = binary.BigEndian.AppendUint32(out, crc(d))
		off += sectionSize + n + 4
	}
	return withTrailer(out, p)
}

// TestWindowRestoreRefusesForgedState restores window dumps whose every
// checksum is right but a ring's state is one no window writes: each is
// ErrBadDump with no key left.
func TestWindowRestoreRefusesForgedState(t *testing.T) {
	rdb := realRedis(t)
	w, _ := dumpWindow(t, rdb, "src", "")
	b := windowDumpOf(t, w)
	if !bytes.Equal(reforgeWindow(b, func(int, []byte) {}), b) {
		t.Fatal("reforgeWindow changes a dump it does not edit")
	}
	field := func(ring []byte, byteAt int) []byte { return ring[byteAt-headerSize : byteAt-headerSize+8] }
	before := keysNow(t, rdb)
	for _, tc := range []struct {
		name string
		edit func(ring []byte)
	}{
		{"another bucket", func(r []byte) { binary.BigEndian.PutUint64(field(r, ringBucketByte), 60000) }},
		{"another W", func(r []byte) { binary.BigEndian.PutUint64(field(r, ringWByte), 6) }},
		{"cursor not a multiple of W", func(r []byte) { binary.BigEndian.PutUint64(field(r, ringCursorByte), 3) }},
		{"cursor past the words", func(r []byte) { binary.BigEndian.PutUint64(field(r, ringCursorByte), 1<<40) }},
		{"a position of another residue", func(r []byte) {
			binary.BigEndian.PutUint64(field(r, ringPositionsByte), 7) // 7 mod 5 is not 0
		}},
		{"a position out of the span of the newest", func(r []byte) {
			b := int64(binary.BigEndian.Uint64(field(r, ringPositionsByte+ringPositionSize*int(time.Now().UnixMilli()/3600000%5))))
			binary.BigEndian.PutUint64(field(r, ringPositionsByte+ringPositionSize*int((b+1)%5)), uint64(b+1-10))
		}},
		{"a position of -3", func(r []byte) { binary.BigEndian.PutUint64(field(r, ringPositionsByte+16), uint64(1<<64-3)) }},
	} {
		g, err := RestoreWindow(ctx, rdb, "forged", WindowOptions{}, bytes.NewReader(reforgeWindow(b, func(p int, r []byte) {
			if p == 1 {
				tc.edit(r)
			}
		})))
		if !errors.Is(err, ErrBadDump) || !strings.Contains(err.Error(), "partition 1: ") {
			t.Errorf("%s: RestoreWindow = %v, want ErrBadDump of partition 1", tc.name, err)
		}
		if err == nil {
			must(0, g.Drop(ctx)).on(t)
		}
		if after := keysNow(t, rdb); !slices.Equal(after, before) {
			t.Fatalf("%s: keys %v after, %v before", tc.name, after, before)
		}
	}
}

// TestWindowRestoreExisting: a window of that name is not replaced by
// RestoreWindow (ErrExists, nothing changed), and is by
// RestoreWindowReplace, at another number of partitions too: then it
// holds the dump's events and not the old window's.
func TestWindowRestoreExisting(t *testing.T) {
	rdb := realRedis(t)
	w, evs := dumpWindow(t, rdb, "src", "")
	b := windowDumpOf(t, w)
	o := dumpWindowOpts
	o.Partitions = 2
	old := created(t, must(NewWindow(rdb, "there", o)).on(t))
	oldEvs := events("old-", 500)
	must(old.TestOrAddMany(ctx, oldEvs)).on(t)
	before := dump(t, rdb)
	if _, err := RestoreWindow(ctx, rdb, "there", WindowOptions{}, bytes.NewReader(b)); !errors.Is(err, ErrExists) {
		t.Fatalf("RestoreWindow over a window = %v, want ErrExists", err)
	}
	if after := dump(t, rdb); !mapsEqual(after, before) {
		t.Fatal("a refused restore changed keys")
	}
	// A damaged dump leaves the old window as it was.
	if _, err := RestoreWindowReplace(ctx, rdb, "there", WindowOptions{}, bytes.NewReader(b[:len(b)-1])); !errors.Is(err, ErrBadDump) {
		t.Fatalf("RestoreWindowReplace of a cut dump = %v, want ErrBadDump", err)
	}
	if after := dump(t, rdb); !mapsEqual(after, before) {
		t.Fatal("a refused replace changed keys")
	}
	g := must(RestoreWindowReplace(ctx, rdb, "there", WindowOptions{}, bytes.NewReader(b))).on(t)
	allSeen(t, g, evs)
	fewSeen(t, g, oldEvs)
	for _, k := range keysNow(t, rdb) {
		if strings.HasPrefix(k, "rbloom:{there") && !slices.ContainsFunc(g.f.parts, func(p part) bool { return strings.HasPrefix(k, p.key+":") }) {
			t.Errorf("key %s of the replaced window left", k)
		}
	}
	// The old handle, of two partitions, is refused.
	if _, err := old.TestMany(ctx, oldEvs); !errors.Is(err, ErrParamsMismatch) {
		t.Errorf("the replaced window's handle: TestMany = %v, want ErrParamsMismatch", err)
	}
}

// TestWindowDumpExpiredRings dumps windows whose rings expired, all of
// them or one beside a live root: the dump holds no ring for them, and
// the restored window reads and writes as the dumped one did.
func TestWindowDumpExpiredRings(t *testing.T) {
	rdb := realRedis(t)
	expire := func(w *Window, p int) {
		rdb.Del(ctx, w.ringKey(p))
		rdb.HSet(ctx, w.settingsKey(p), "ring", time.Now().Add(-time.Minute).UnixMilli())
	}
	for _, all := range []bool{true, false} {
		name := fmt.Sprint("expired-", all)
		w, evs := dumpWindow(t, rdb, name, "")
		var kept []string
		for p := range w.f.parts {
			if all || p != w.root {
				expire(w, p)
			}
		}
		for _, e := range evs {
			if p, _ := w.f.locate(nil, e); !all && p == w.root {
				kept = append(kept, e)
			}
		}
		b := windowDumpOf(t, w)
		g := must(RestoreWindow(ctx, rdb, name+"-copy", WindowOptions{}, bytes.NewReader(b))).on(t)
		for p := range g.f.parts {
			if n := rdb.Exists(ctx, g.ringKey(p)).Val(); n != 0 && (all || p != w.root) { // the dumped root's index, not the copy's
				t.Errorf("all %v: %s restored, its ring had expired", all, g.ringKey(p))
			}
		}
		allSeen(t, g, kept)
		// The events of the expired rings are new again, in both.
		var gone []string
		for _, e := range evs {
			if p, _ := w.f.locate(nil, e); all || p != w.root {
				gone = append(gone, e)
			}
		}
		fewSeen(t, g, gone)
		if seen := must(g.TestOrAddMany(ctx, gone[:10])).on(t); slices.Contains(seen, true) {
			t.Errorf("all %v: events of an expired ring answered seen: %v", all, seen)
		}
		allSeen(t, g, gone[:10])
	}
}

// TestWindowDumpConsistentUnderWrites dumps a window while writers add
// to it: every event whose TestOrAddMany returned before Dump began is
// seen in the restored window, and every ring restored is one a window
// writes (the restore checks each state).
func TestWindowDumpConsistentUnderWrites(t *testing.T) {
	rdb := realRedis(t)
	w := created(t, must(NewWindow(rdb, "busy", WindowOptions{EventsPerBucket: 200_000, Bucket: time.Hour, Span: 3 * time.Hour, Partitions: 2})).on(t))
	var mu sync.Mutex
	var done []string
	var stop atomic.Bool
	var wg sync.WaitGroup
	for wr := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				batch := events(fmt.Sprintf("w%d-%d-", wr, i), 200)
				if _, err := w.TestOrAddMany(ctx, batch); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				done = append(done, batch...)
				mu.Unlock()
			}
		}()
	}
	waitFor(t, "some events", func() bool { mu.Lock(); defer mu.Unlock(); return len(done) > 20000 })
	for i := range 3 {
		mu.Lock()
		before := slices.Clone(done)
		mu.Unlock()
		b := windowDumpOf(t, w)
		g := must(RestoreWindow(ctx, rdb, fmt.Sprint("busy-copy-", i), WindowOptions{}, bytes.NewReader(b))).on(t)
		for j, ok := range must(g.TestMany(ctx, before)).on(t) {
			if !ok {
				t.Fatalf("dump %d: %q, added before the dump began, is not in it", i, before[j])
			}
		}
	}
	stop.Store(true)
	wg.Wait()
}

// TestWindowDumpCluster restores a window of a single server into a
// cluster of three masters, and its dump there back into a single server.
func TestWindowDumpCluster(t *testing.T) {
	_, cc := clusterClient(t)
	single := realRedis(t)
	w, evs := dumpWindow(t, single, "wc", "")
	g := must(RestoreWindow(ctx, cc, "wc", WindowOptions{}, bytes.NewReader(windowDumpOf(t, w)))).on(t)
	allSeen(t, g, evs)
	fewSeen(t, g, events("never-", 1000))
	back := must(RestoreWindow(ctx, single, "wc-back", WindowOptions{KeyPrefix: "back:"}, bytes.NewReader(windowDumpOf(t, g)))).on(t)
	allSeen(t, back, evs)
	for _, k := range keysNow(t, cc) {
		if strings.Contains(k, ":restore:") || strings.Contains(k, ":dump:") || strings.HasSuffix(k, ":rebuild") || strings.HasSuffix(k, ":restoring") {
			t.Errorf("key %s left behind on the cluster", k)
		}
	}
}

// TestWindowDumpAcrossServers dumps a window from each server and
// restores it into each other, as TestDumpAcrossServers does filters.
func TestWindowDumpAcrossServers(t *testing.T) {
	acrossServers(t, func(t *testing.T, src, dst *redis.Client) {
		w, evs := dumpWindow(t, src, "wx", "")
		g := must(RestoreWindow(ctx, dst, "wx", WindowOptions{KeyPrefix: "moved:"}, bytes.NewReader(windowDumpOf(t, w)))).on(t)
		allSeen(t, g, evs)
	})
}

// TestWindowDumpACL: the least-privilege user of docs/operations.md
// restores a window's dump, and dumps one given +copy.
func TestWindowDumpACL(t *testing.T) {
	admin := realRedis(t)
	w, evs := dumpWindow(t, admin, "src", "")
	b := windowDumpOf(t, w)
	app := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: aclUser, Password: aclPassword, MaxRetries: -1})
	defer app.Close()
	for _, cmd := range [][]any{aclSetUser(append(slices.Clone(aclCommands), "+copy")), {"SCRIPT", "FLUSH"}} {
		if err := admin.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	g := must(RestoreWindow(ctx, app, "acl", WindowOptions{}, bytes.NewReader(b))).on(t)
	allSeen(t, g, evs)
	if b2 := windowDumpOf(t, g); len(b2) != len(b) {
		t.Fatalf("the dump of the restored window: %d bytes, want %d", len(b2), len(b))
	}
	must(RestoreWindowReplace(ctx, app, "acl", WindowOptions{}, bytes.NewReader(b))).on(t)
}

// TestRestoreScriptForgedWindow calls restore.lua's window form with
// forged arguments: each is refused, and nothing is written.
func TestRestoreScriptForgedWindow(t *testing.T) {
	rdb := realRedis(t)
	w := must(NewWindow(rdb, "forged", dumpWindowOpts)).on(t)
	key := w.ringKey(0)
	head := []byte(withIncarnation(w.f.parts[0].head, randomIncarnation()))
	head[markByte] = markLoad
	staging := stagingKey(key, "tok")
	rdb.Set(ctx, staging, string(head), 0)
	rdb.SetRange(ctx, staging, w.r.size-1, "\x00")
	keys := []string{key, staging, leaseKey(key), w.settingsKey(0)}
	at := fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())
	good := []any{string(head), "install", "tok", "30000", "0", fmt.Sprint(w.r.size), w.settings[0], at, "0"}
	with := func(i int, v any) []any { a := slices.Clone(good); a[i] = v; return a }
	other := must(NewWindow(rdb, "other", WindowOptions{EventsPerBucket: 10, Bucket: time.Hour, Span: time.Hour})).on(t)
	before := dump(t, rdb)
	for name, args := range map[string][]any{
		"a TTL besides the expiry": with(4, "1000"),
		"a negative ring length":   with(5, "-1"),
		"a ring length of a head":  with(5, "64"),
		"a ring length too long":   with(5, fmt.Sprint(maxStringBytes+1)),
		"settings of no header":    with(6, "x"),
		"another window's":         with(6, other.settings[0]),
		"an expiry of 0":           with(7, "0"),
		"an expiry not a number":   with(7, "soon"),
		"a negative settings TTL":  with(8, "-1"),
		"no settings TTL":          good[:8],
	} {
		err := restoreScript.Run(ctx, rdb, keys, args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "RBLOOM_ARGS") {
			t.Errorf("%s: %v, want RBLOOM_ARGS", name, err)
		}
	}
	if after := dump(t, rdb); !mapsEqual(after, before) {
		t.Fatal("a refused call of restore.lua wrote")
	}
	if got := must(restoreScript.Run(ctx, rdb, keys, good...).Text()).on(t); got != restoreOK {
		t.Fatalf("install = %q, want %q", got, restoreOK)
	}
}

// TestWindowRestoreDiedBeforeOpen: a restore whose process died between
// its install and its open leaves rings that every read and call refuses,
// writing nothing, and that Create refuses to make a window over, never
// answering an event of the dump new; Drop deletes them, and Create then
// makes the window, empty.
func TestWindowRestoreDiedBeforeOpen(t *testing.T) {
	rdb := realRedis(t)
	w, evs := dumpWindow(t, rdb, "src", "")
	rs, g := stagedWindow(t, rdb, "died", windowDumpOf(t, w))
	if err := rs.step(ctx, "install"); err != nil {
		t.Fatal(err)
	}
	before := dump(t, rdb)
	for name, call := range map[string]func() ([]bool, error){
		"TestMany":          func() ([]bool, error) { return g.TestMany(ctx, evs) },
		"TestOrAddMany":     func() ([]bool, error) { return g.TestOrAddMany(ctx, evs) },
		"TestOrAddManyOnce": func() ([]bool, error) { return g.TestOrAddManyOnce(ctx, evs, "op") },
		"Create":            func() ([]bool, error) { return nil, g.Create(ctx) },
	} {
		if seen, err := call(); err == nil {
			t.Errorf("%s on a restore that died before its open: %v, no error", name, seen)
		}
	}
	if after := dump(t, rdb); !mapsEqual(before, after) {
		t.Error("a refused call wrote")
	}
	must(0, g.Drop(ctx)).on(t)
	created(t, g)
	if seen := must(g.TestOrAddMany(ctx, evs)).on(t); slices.Contains(seen, true) {
		t.Error("the window made after the Drop holds events of the dump")
	}
}
