package rbloom

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Each write operation is one Lua script: lua/filter.lua, shared, followed
// by the operation's own file. Reads need no script (see read.go).
var (
	//go:embed lua/filter.lua
	filterLua string

	//go:embed lua/add.lua
	addLua    string
	addScript = redis.NewScript(filterLua + addLua)

	//go:embed lua/remove.lua
	removeLua    string
	removeScript = redis.NewScript(filterLua + removeLua)

	//go:embed lua/rebuild.lua
	rebuildLua    string
	rebuildScript = redis.NewScript(filterLua + rebuildLua)
)
