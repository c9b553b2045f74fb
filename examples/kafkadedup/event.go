package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// event is one click, as the producer writes it to the input topic: its
// own id, which a retry sends again unchanged, and its campaign.
type event struct {
	ID       string `json:"id"`
	Campaign string `json:"campaign"`
}

// campaigns is how many campaigns the generated clicks are spread over.
const campaigns = 8

// generate returns n distinct clicks in the order a producer writes them,
// a share dupRate of them written a second time: half right after the
// first, half up to 500 clicks later, as a producer's retries and a
// client resending after a timeout do. The same seed gives the same list.
func generate(n int, dupRate float64, seed uint64) []event {
	r := rand.New(rand.NewPCG(seed, 0x6b61666b61))
	var out []event
	var later []event // second copies not written yet, each after its due index
	var due []int
	for i := range n {
		e := event{ID: fmt.Sprintf("click-%d-%08x", i, r.Uint32()), Campaign: fmt.Sprintf("c%d", r.IntN(campaigns))}
		out = append(out, e)
		if r.Float64() < dupRate {
			if r.IntN(2) == 0 {
				out = append(out, e)
			} else {
				later, due = append(later, e), append(due, i+1+r.IntN(500))
			}
		}
		for len(due) > 0 && due[0] <= i {
			out, later, due = append(out, later[0]), later[1:], due[1:]
		}
	}
	return append(out, later...)
}

// distinct is the truth a run is checked against: the clicks of written
// by id, each once.
func distinct(written []event) map[string]event {
	m := make(map[string]event, len(written))
	for _, e := range written {
		m[e.ID] = e
	}
	return m
}

// decodeEvent reads a record's value.
func decodeEvent(value []byte) (event, error) {
	var e event
	if err := json.Unmarshal(value, &e); err != nil {
		return e, fmt.Errorf("decode click %.40q: %w (the input topic must hold JSON {\"id\":...,\"campaign\":...})", value, err)
	}
	if e.ID == "" {
		return e, fmt.Errorf("click %.40q has no id: every click needs its own id, which retries repeat", value)
	}
	return e, nil
}
