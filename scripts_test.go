package rbloom

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestForgedArguments calls the scripts directly, as a buggy or hostile
// client could, with arguments the library never sends. Every call must be
// refused before its first write: the database stays byte for byte the same,
// and no string grows (one bad BITFIELD offset can allocate 512 MB).
func TestForgedArguments(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "target", Options{Slots: 100, Hashes: 2}))
		must(c.Add(ctx, "a")).on(t)
		end := strconv.Itoa(headerBits + 100*4) // first bit past the last counter
		huge := header{mode: ModeCounting, k: 2, m: 1 << 31, partitions: 1}.encode()
		ok := []any{"512", "516"} // k = 2
		with := func(i int, v any) []any { s := append([]any{}, ok...); s[i] = v; return s }
		bad := map[string]any{
			"offset past m":      end,
			"offset in header":   "192",
			"negative offset":    "-4",
			"huge offset":        "4000000000",
			"# offset":           "#200",
			"hex offset":         "0x200",
			"offset with space":  " 512",
			"plus sign":          "+512",
			"leading zero":       "0512",
			"fraction":           "512.0",
			"exponent":           "5.12e2",
			"misaligned offset":  "514",
			"non-numeric offset": "abc",
			"empty offset":       "",
		}
		adds := map[string][]any{
			"half an item":     ok[:1],
			"an item and half": append(slices.Clone(ok), "520"),
		}
		for name, v := range bad {
			adds[name] = with(1, v)
		}
		for _, key := range []string{c.f.parts[0].key, keyOf(DefaultKeyPrefix, "missing")} {
			before := dump(t, rdb)
			for name, slots := range adds {
				args := append([]any{c.f.parts[0].head, "0", "60000", "1", "0", forgedField, "", "0"}, slots...)
				err := addScript.Run(ctx, rdb, forgedKeys(key), args...).Err()
				if err == nil {
					t.Errorf("add on %s with %s: no error", key, name)
				}
			}
			for name, args := range map[string][]any{
				"bad TTL":               append([]any{c.f.parts[0].head, "abc", "60000", "1", "0", forgedField, "", "0"}, ok...),
				"negative TTL":          append([]any{c.f.parts[0].head, "-1", "60000", "1", "0", forgedField, "", "0"}, ok...),
				"zero keep":             append([]any{c.f.parts[0].head, "0", "0", "1", "0", forgedField, "", "0"}, ok...),
				"bad create":            append([]any{c.f.parts[0].head, "0", "60000", "2", "0", forgedField, "", "0"}, ok...),
				"record-only, answer 2": append([]any{c.f.parts[0].head, "0", "60000", "r2", "0", forgedField, "", "0"}, ok...),
				"bad limit":             append([]any{c.f.parts[0].head, "0", "60000", "1", "-1", forgedField, "", "0"}, ok...),
				"limit reached":         append([]any{c.f.parts[0].head, "0", "60000", "1", "1", forgedField, "", "0"}, append(slices.Clone(ok), ok...)...),
				"bad only-absent":       append([]any{c.f.parts[0].head, "0", "60000", "1", "0", forgedField, "", "2"}, ok...),
				"short tag":             append([]any{c.f.parts[0].head, "0", "60000", "1", "0", forgedField, "short", "0"}, ok...),
				"long field":            append([]any{c.f.parts[0].head, "0", "60000", "1", "0", strings.Repeat("a", 13), "", "0"}, ok...),
				"tag, one key":          append([]any{c.f.parts[0].head, "0", "60000", "1", "0", forgedField, "12345678", "0"}, ok...),
				"short header":          append([]any{c.f.parts[0].head[:63], "0", "60000", "1", "0", forgedField, "", "0"}, ok...),
				"huge m":                append([]any{huge, "0", "60000", "1", "0", forgedField, "", "0"}, ok...),
				"foreign header":        append([]any{strings.Repeat("x", 64), "0", "60000", "1", "0", forgedField, "", "0"}, ok...),
			} {
				err := addScript.Run(ctx, rdb, forgedKeys(key), args...).Err()
				if err == nil {
					t.Errorf("add on %s with %s: no error", key, name)
				}
			}
			for name, slots := range adds {
				args := append([]any{c.f.parts[0].head, "60000", forgedField, ""}, slots...)
				err := removeScript.Run(ctx, rdb, forgedRemoveKeys(key), args...).Err()
				// Lua's tonumber reads some of the bad offsets ("0x200",
				// "0512", " 512") and only BITFIELD refuses them; on a
				// missing filter remove answers "absent" without calling
				// BITFIELD. Either way nothing is written.
				if err == nil && (key == c.f.parts[0].key || !readByTonumber(name)) {
					t.Errorf("remove on %s with %s: no error", key, name)
				}
			}
			if after := dump(t, rdb); !maps.Equal(before, after) {
				t.Errorf("forged calls on %s changed Redis:\nbefore %q\nafter  %q", key, before, after)
			}
		}
	})
}

// readByTonumber reports whether the bad offset of TestForgedArguments
// named name is one Lua's tonumber reads as a valid offset.
func readByTonumber(name string) bool {
	switch name {
	case "hex offset", "offset with space", "plus sign", "leading zero", "fraction", "exponent":
		return true
	}
	return false
}

// TestRetryAppliesOnce re-sends a script call with the same operation key,
// as go-redis does when a reply is lost: the second call must return the
// first answer and change nothing.
func TestRetryAppliesOnce(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		// CreateOnWrite: the add creates the filter, and its re-send must
		// answer so too.
		c := newCounting(t, rdb, "retry", Options{Slots: 64, Hashes: 3, CreateOnWrite: true})
		ab := []string{"a", "b"}
		add := c.f.call(c.f.addOp(), 0, 0, c.f.place(ab), []int{0, 1}).wire()
		remove := c.f.call(c.f.removeOp(), 0, 0, c.f.place(ab), []int{0}).wire()
		for _, call := range []struct {
			script *redis.Script
			scriptCall
			want string
		}{
			{addScript, add, "+00"}, // "+": this call created the filter
			{removeScript, remove, "1"},
		} {
			keys := call.keys
			first := must(call.script.Run(ctx, rdb, keys, call.args...).Text()).on(t)
			before := slotValues(t, rdb, c.f)
			again := must(call.script.Run(ctx, rdb, keys, call.args...).Text()).on(t)
			if first != call.want || again != first {
				t.Errorf("answers %q then %q, want %q twice", first, again, call.want)
			}
			if after := slotValues(t, rdb, c.f); !slices.Equal(before, after) {
				t.Errorf("the re-sent call changed the counters: %v -> %v", before, after)
			}
		}
		// Once a was added and removed, only b remains.
		want := make([]int, c.f.h.m)
		for _, slot := range globalSlots(c.f, "b") {
			want[slot]++
		}
		if got := slotValues(t, rdb, c.f); !slices.Equal(got, want) {
			t.Errorf("counters = %v, want %v (b alone)", got, want)
		}
	})
}

// TestLuaLayoutFromGo: the scripts take every number of the format from
// the constants scripts.go writes from Go, never from a literal of their
// own that could drift from header.go.
func TestLuaLayoutFromGo(t *testing.T) {
	files, err := filepath.Glob("lua/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("lua/*.lua: %v, %v", files, err)
	}
	literal := regexp.MustCompile(`[^\w.^](24|25|32|33|48|49|50|64|98|99|192|1024)\b|'rbloom'`)
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			code, _, _ := strings.Cut(line, "--")
			if m := literal.FindString(code); m != "" {
				t.Errorf("%s:%d: layout literal %q: use the constant scripts.go writes", file, i+1, strings.TrimSpace(m))
			}
		}
	}
	for _, want := range []string{"local HEADER = 64\n", "local MARK_BYTE, MARK_REBUILD, MARK_RESIZE, MARK_LOAD = 48, 1, 2, 3\n", "local MAGIC = \"rbloom\"\n", "local COUNTING, CLASSIC = 99, 98\n"} {
		if !strings.Contains(luaConstants, want) {
			t.Errorf("luaConstants lacks %q:\n%s", want, luaConstants)
		}
	}
}

// TestReadScriptRefuses: read.lua, the reads' fallback out of memory,
// refuses arguments no client of this version sends with RBLOOM_ARGS,
// passes a key's type error on as WRONGTYPE (a read then fails with
// ErrNotFilter), and writes nothing either way.
func TestReadScriptRefuses(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "read-lua", Options{Slots: 100, Hashes: 2}))
	must(c.Add(ctx, "a")).on(t)
	key := c.f.parts[0].key
	rdb.RPush(ctx, "read-lua-list", "x")
	before := dump(t, rdb)
	for name, call := range map[string]struct {
		keys []string
		args []any
	}{
		"no header size":    {[]string{key}, nil},
		"header size 0":     {[]string{key}, []any{0}},
		"header size of 5k": {[]string{key}, []any{5000}},
		"half a GET":        {[]string{key}, []any{headerSize, "GET", "u4"}},
		"two keys":          {[]string{key, key}, []any{headerSize}},
		"not a number":      {[]string{key}, []any{"x"}},
	} {
		err := readScript.Run(ctx, rdb, call.keys, call.args...).Err()
		if err == nil || !strings.Contains(err.Error(), "RBLOOM_ARGS") {
			t.Errorf("read.lua with %s: %v, want RBLOOM_ARGS", name, err)
		}
	}
	if err := readScript.Run(ctx, rdb, []string{"read-lua-list"}, headerSize).Err(); !redis.HasErrorPrefix(err, "WRONGTYPE") {
		t.Errorf("read.lua on a list: %v, want WRONGTYPE", err)
	}
	got, err := readScript.Run(ctx, rdb, []string{key}, headerSize, "GET", "u4", headerBits).Slice()
	if len(got) == 0 {
		t.Fatalf("read.lua of the filter: %v, %v", got, err)
	}
	if head, _ := got[0].(string); err != nil || len(got) != 3 || !strings.HasPrefix(head, c.f.parts[0].head[:identitySize]) || got[1] != c.f.h.size() {
		t.Errorf("read.lua of the filter: %v, %v", got, err)
	}
	if after := dump(t, rdb); !maps.Equal(before, after) {
		t.Error("read.lua changed Redis")
	}
}
