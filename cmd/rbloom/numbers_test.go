package main

import (
	"math"
	"strings"
	"testing"
)

func TestParseWhole(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want uint64
		err  string // a part of the error; "" for none
	}{
		{"1000000", 1_000_000, ""},
		{"1_000_000", 1_000_000, ""},
		{"1e6", 1_000_000, ""},
		{"1E6", 1_000_000, ""},
		{"1e+6", 1_000_000, ""},
		{"2.5e6", 2_500_000, ""},
		{"1.000", 1, ""},
		{"0", 0, ""},
		{"007", 7, ""}, // decimal, not octal
		{"18446744073709551615", math.MaxUint64, ""},
		{"18_446_744_073_709_551_615", math.MaxUint64, ""},
		{"1.8446744073709551615e19", math.MaxUint64, ""},
		{"100000000000000000000e-2", 1e18, ""},

		{"1.5", 0, "want a whole number, not a fraction"},
		{"1e-3", 0, "want a whole number, not a fraction"},
		{"2.55e1", 0, "want a whole number, not a fraction"},
		{"-5", 0, "want a whole number, not a negative one"},
		{"-1e6", 0, "want a whole number, not a negative one"},
		{"18446744073709551616", 0, "too large: want at most 18446744073709551615"},
		{"1e20", 0, "too large"},
		{"1e999999999999", 0, "too large"},
		{"abc", 0, wantWhole},
		{"", 0, wantWhole},
		{"1,000,000", 0, wantWhole},
		{"1__000", 0, wantWhole},
		{"_1000", 0, wantWhole},
		{"1000_", 0, wantWhole},
		{"0x10", 0, wantWhole},
		{"1.", 0, wantWhole},
		{".5e1", 0, wantWhole},
		{"1e", 0, wantWhole},
		{" 1", 0, wantWhole},
		{"+1", 0, wantWhole},
		{"Inf", 0, wantWhole},
	} {
		got, err := parseWhole(c.in, math.MaxUint64)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("parseWhole(%q) = %d, %v; want %d", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("parseWhole(%q) = %d, %v; want an error with %q", c.in, got, err, c.err)
		}
	}
	if _, err := parseWhole("1025", 1024); err == nil || err.Error() != "too large: want at most 1024" {
		t.Errorf("parseWhole(1025, max 1024) = %v, want too large", err)
	}
	// An int flag stops at math.MaxInt.
	var n int
	if err := newWhole(&n, 0, 0).Set("9223372036854775808"); err == nil {
		t.Errorf("int flag Set(2^63) = nil, n = %d; want too large", n)
	}
	if err := newWhole(&n, 0, 0).Set("9_223_372_036_854_775_807"); err != nil || n != math.MaxInt {
		t.Errorf("int flag Set(2^63-1) = %v, n = %d", err, n)
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want float64 // 0: an error
	}{
		{"0.01", 0.01},
		{"1%", 0.01},
		{"1e-3", 0.001},
		{"1E-3", 0.001},
		{".5", 0.5},
		{"0.5%", 0.005},
		{"99.9%", 0.999},
		{"1e-3%", 1e-5},
		{"0", 0},
		{"0%", 0},
		{"1", 0},
		{"100%", 0},
		{"1.5", 0},
		{"-0.01", 0},
		{"-1%", 0},
		{"NaN", 0},
		{"Inf", 0},
		{"0x1p-3", 0},
		{"1 %", 0},
		{"%", 0},
		{"", 0},
		{"1e-999", 0},
		{"one percent", 0},
	} {
		got, err := parseRate(c.in)
		switch {
		case c.want != 0 && (err != nil || math.Abs(got-c.want) > 1e-15):
			t.Errorf("parseRate(%q) = %g, %v; want %g", c.in, got, err, c.want)
		case c.want == 0 && (err == nil || err.Error() != wantRate):
			t.Errorf("parseRate(%q) = %g, %v; want the error %q", c.in, got, err, wantRate)
		}
	}
}

// TestNumberFlags runs the commands whose flags take numbers with each
// way of writing one, and with values they refuse.
func TestNumberFlags(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	const created = "created f: counting, m=9585059 k=7, for 1000000 items at error rate 1%, 4.6 MiB in Redis\n"
	rb(t, u, "", "create", "f", "--capacity", "1e6").ok(t, created)
	for _, args := range [][]string{
		{"--capacity", "1000000"},
		{"--capacity", "1_000_000", "--error-rate", "0.01"},
		{"--capacity=1e6", "--error-rate=1%"},
		{"--capacity", "1.0e6", "--error-rate", "1e-2"},
	} {
		rb(t, u, "", append([]string{"create", "f"}, args...)...).ok(t, strings.Replace(created, "created f", "f exists already", 1))
	}
	rb(t, u, "", "create", "g", "--capacity", "1e3", "--error-rate", "0.1%").ok(t,
		"created g: counting, m=14378 k=10, for 1000 items at error rate 0.1%, 7.1 KiB in Redis\n")
	if r := rb(t, u, "", "create", "h", "-m", "1e3", "-k", "3", "--partitions", "2"); r.code != 0 ||
		!strings.HasPrefix(r.stdout, "created h: counting, m=1000 k=3 in 2 partitions, ") {
		t.Errorf("create -m 1e3 -k 3 --partitions 2: %+v", r)
	}
	rb(t, u, "", "add", "i", "--capacity", "10_000", "--error-rate", "1e-3", "x").ok(t, "new\tx\n")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--capacity", "abc"}, `create: --capacity "abc": want a whole number such as 1000000, 1_000_000 or 1e6`},
		{[]string{"--capacity", "1.5"}, `create: --capacity "1.5": want a whole number, not a fraction`},
		{[]string{"--capacity", "1e-3"}, `create: --capacity "1e-3": want a whole number, not a fraction`},
		{[]string{"--capacity", "-5"}, `create: --capacity "-5": want a whole number, not a negative one`},
		{[]string{"--capacity=-1e6"}, `create: --capacity "-1e6": want a whole number, not a negative one`},
		{[]string{"--capacity", "1e30"}, `create: --capacity "1e30": too large: want at most 18446744073709551615`},
		{[]string{"-m", "1k", "-k", "3"}, `create: -m/--slots "1k": want a whole number such as`},
		{[]string{"-m", "1000", "-k", "2.5"}, `create: -k/--hashes "2.5": want a whole number, not a fraction`},
		{[]string{"--capacity", "100", "--partitions", "1e19"}, `create: --partitions "1e19": too large: want at most 9223372036854775807`},
		{[]string{"--capacity", "100", "--error-rate", "5"}, `create: --error-rate "5": want a rate above 0 and below 1 such as 0.01, 1% or 1e-3`},
		{[]string{"--capacity", "100", "--error-rate", "1 %"}, `create: --error-rate "1 %": want a rate above 0 and below 1`},
		{[]string{"--capacity", "100", "--error-rate", "0"}, `create: --error-rate "0": want a rate above 0 and below 1`},
		{[]string{"--capacity", "100", "--error-rate", "-1%"}, `create: --error-rate "-1%": want a rate above 0 and below 1`},
	} {
		rb(t, u, "", append([]string{"create", "k"}, c.args...)...).fails(t, c.want)
	}
	rb(t, u, "", "add", "k", "--capacity", "1.5", "x").fails(t, `add: --capacity "1.5": want a whole number, not a fraction`)
	for _, flag := range []string{"--capacity", "-m", "-k", "--partitions"} {
		rb(t, u, "", "create", "k", flag, "0").fails(t, `create: `, flag, ` "0": want at least 1`)
	}

	// demo, with its own flag package.
	if r := rb(t, u, "", "demo", "-n", "1e3", "-p", "1%"); r.code != 0 || r.stderr != "" ||
		!strings.Contains(r.stdout, ": 1000 items, target false-positive rate 0.01\n") {
		t.Errorf("demo -n 1e3 -p 1%%: %+v", r)
	}
	rb(t, u, "", "demo", "-n", "1_000", "-p", "50%x").fails(t, `demo: invalid value "50%x" for flag -p: want a rate above 0 and below 1`)
	rb(t, u, "", "demo", "-n", "0.5e3x").fails(t, `demo: invalid value "0.5e3x" for flag -n: want a whole number such as 1000000, 1_000_000 or 1e6`)
	rb(t, u, "", "demo", "-n", "-10").fails(t, `demo: invalid value "-10" for flag -n: want a whole number, not a negative one`)

	// The defaults show in the help as they did.
	help := rb(t, "", "", "help", "create").stdout
	for _, want := range []string{"--capacity N ", "--error-rate P ", `(default 0.01)`, "-m, --slots M ", "-k, --hashes K ", "--partitions P "} {
		if !strings.Contains(help, want) {
			t.Errorf("help create = %q, want it to contain %q", help, want)
		}
	}
}
