package main

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/journal.lua
	journalLua    string
	journalScript = redis.NewScript(journalLua)

	//go:embed lua/apply.lua
	applyLua    string
	applyScript = redis.NewScript(applyLua)
)
