package main

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Flags that count something (--capacity, -m, -k, --partitions, demo's -n)
// take a whole number written as 1000000, 1_000_000 or 1e6; flags that
// give a rate (--error-rate, demo's -p) take 0.01, 1% or 1e-3. Both kinds
// satisfy flag.Value and pflag.Value, and their errors say what is
// accepted: pflag and flag put the flag and the value before them.

const (
	wantWhole = "want a whole number such as 1000000, 1_000_000 or 1e6"
	wantRate  = "want a rate above 0 and below 1 such as 0.01, 1% or 1e-3"
)

// wholeSyntax is a whole number as count flags take it: digits, with
// single underscores between them, then an optional fraction and
// exponent, which together must leave no fraction (1.5e6, not 1.5).
var wholeSyntax = regexp.MustCompile(`^([0-9]+(?:_[0-9]+)*)(?:\.([0-9]+))?(?:[eE]([-+]?[0-9]+))?$`)

// parseWhole parses s as a whole number, at most max.
func parseWhole(s string, max uint64) (uint64, error) {
	if strings.HasPrefix(s, "-") {
		if n, err := parseWhole(s[1:], max); err == nil && n != 0 {
			return 0, errors.New("want a whole number, not a negative one")
		}
	}
	m := wholeSyntax.FindStringSubmatch(s)
	if m == nil {
		return 0, errors.New(wantWhole)
	}
	digits := strings.ReplaceAll(m[1], "_", "") + m[2]
	shift := -len(m[2]) // digits * 10^shift is the number
	if m[3] != "" {
		e, err := strconv.Atoi(m[3])
		switch {
		case err != nil && m[3][0] == '-', e < -100:
			e = -100 // past any digits: a fraction, unless they are all 0
		case err != nil, e > 100:
			e = 100 // too large, unless the digits are all 0
		}
		shift += e
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return 0, nil
	}
	// A negative shift drops digits, which must be zeros.
	for ; shift < 0; shift++ {
		last := len(digits) - 1
		if last < 0 || digits[last] != '0' {
			return 0, errors.New("want a whole number, not a fraction")
		}
		digits = digits[:last]
	}
	if len(digits)+shift > 20 {
		return 0, fmt.Errorf("too large: want at most %d", max)
	}
	n, err := strconv.ParseUint(digits+strings.Repeat("0", shift), 10, 64)
	if err != nil || n > max {
		return 0, fmt.Errorf("too large: want at most %d", max)
	}
	return n, nil
}

// An explainer is a flag value whose errors say what it accepts: the
// usage is no help after them.
type explainer interface{ explains() }

func (wholeValue[T]) explains() {}
func (rateValue) explains()     {}

// wholeValue is the value of a count flag, stored in *p, at least min.
type wholeValue[T int | uint64] struct {
	p   *T
	min uint64
}

// newWhole returns the value of a count flag that sets *p, after setting
// it to v, its default. The flag refuses values below min.
func newWhole[T int | uint64](p *T, v T, min uint64) wholeValue[T] {
	*p = v
	return wholeValue[T]{p, min}
}

func (v wholeValue[T]) Set(s string) error {
	max := uint64(math.MaxUint64)
	if _, ok := any(*v.p).(int); ok {
		max = math.MaxInt
	}
	n, err := parseWhole(s, max)
	if err != nil {
		return err
	}
	if n < v.min {
		return fmt.Errorf("want at least %d", v.min)
	}
	*v.p = T(n)
	return nil
}

func (v wholeValue[T]) String() string {
	if v.p == nil { // flag.isZeroValue calls it on a zero value
		return "0"
	}
	return strconv.FormatUint(uint64(*v.p), 10)
}

func (wholeValue[T]) Type() string { return "number" }

// rateSyntax is a rate as rate flags take it: a decimal number, with an
// optional exponent, or a percentage.
var rateSyntax = regexp.MustCompile(`^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?%?$`)

// parseRate parses s as a rate in (0, 1).
func parseRate(s string) (float64, error) {
	if !rateSyntax.MatchString(s) {
		return 0, errors.New(wantRate)
	}
	num, pct := strings.CutSuffix(s, "%")
	p, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, errors.New(wantRate)
	}
	if pct {
		p /= 100
	}
	if !(p > 0 && p < 1) {
		return 0, errors.New(wantRate)
	}
	return p, nil
}

// rateValue is the value of a rate flag, stored in *p.
type rateValue struct{ p *float64 }

func newRate(p *float64, v float64) rateValue {
	*p = v
	return rateValue{p}
}

func (v rateValue) Set(s string) error {
	p, err := parseRate(s)
	if err != nil {
		return err
	}
	*v.p = p
	return nil
}

func (v rateValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (rateValue) Type() string { return "rate" }
