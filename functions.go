package rbloom

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Redis functions (Redis 7.0 and later): the write scripts, installed once
// by an admin as a function library, so that the application calls them
// with FCALL and needs neither EVAL nor EVALSHA. Functions are saved with
// the data (RDB and AOF) and replicated: unlike the script cache, a
// restart or a failover does not lose them.
//
// The library is generated from the same Lua as the scripts: each function
// is a callback function(KEYS, ARGV) ... end whose body is the script
// itself, the constants, lua/filter.lua and the operation's file. The files
// use KEYS and ARGV as the names of their arguments only, and their
// top-level return becomes the callback's. The shared part cannot be put
// once at the library's top: while FUNCTION LOAD runs that, Redis 7.0
// gives it no global but redis (string.rep there fails with "Script
// attempted to access nonexistent global variable 'string'"). Each call
// thus runs the same code as EVALSHA does. No function declares no-writes:
// all of them may write.
//
// The library and its functions are named after a hash of the library's
// source, so that two versions of rbloom sharing a Redis each call their
// own: loading one never replaces the other's functions.

// library is this version's function library.
var library = newFunctionLibrary()

// functionLibrary is a generated Redis function library.
type functionLibrary struct {
	name      string                   // "rbloom_" and 8 hex digits of the source's hash
	code      string                   // the source FUNCTION LOAD takes
	functions map[*redis.Script]string // the function each script is installed as
}

// libraryOps are the scripts the library holds, with the suffix of each
// one's function name and its own Lua file.
var libraryOps = []struct {
	script *redis.Script
	suffix string
	lua    string
}{
	{addScript, "add", addLua},
	{removeScript, "remove", removeLua},
	{rebuildScript, "rebuild", rebuildLua},
	{cuckooScript, "cuckoo", cuckooLua},
	{windowScript, "window", windowLua},
}

func newFunctionLibrary() functionLibrary {
	// The hash is that of the source written with an empty name, so that
	// the name does not depend on itself.
	sum := sha256.Sum256([]byte(librarySource("")))
	name := "rbloom_" + hex.EncodeToString(sum[:4])
	lib := functionLibrary{name: name, code: librarySource(name), functions: map[*redis.Script]string{}}
	for _, op := range libraryOps {
		lib.functions[op.script] = name + "_" + op.suffix
	}
	return lib
}

// librarySource is the library's Lua source, its library and functions
// named after name.
func librarySource(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!lua name=%s\n", name)
	b.WriteString("-- rbloom's write scripts as a Redis function library, written by\n")
	b.WriteString("-- functions.go from lua/*.lua. Installed by rbloom.InstallFunctions.\n")
	for _, op := range libraryOps {
		fmt.Fprintf(&b, "\nredis.register_function('%s_%s', function(KEYS, ARGV)\n%s%s%s\nend)\n",
			name, op.suffix, luaConstants, filterLua, op.lua)
	}
	return b.String()
}

// function returns the name of the function that runs script.
func (l functionLibrary) function(script *redis.Script) string {
	return l.functions[script]
}

// functionError returns err, the error of an FCALL of script's function,
// as ErrNoFunctions when it says that the function, or FCALL itself, is
// missing.
func functionError(script *redis.Script, err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err
	}
	msg := rerr.Error()
	switch {
	case strings.HasPrefix(msg, "ERR ") && strings.Contains(msg, "Function not found"):
		return failf(ErrNoFunctions, "%s is not loaded on this server (%s): an admin must run rbloom.InstallFunctions, "+
			"or 'rbloom functions install', on every master; with Options.UseFunctions rbloom never falls back to EVAL",
			library.function(script), msg)
	case strings.HasPrefix(msg, "ERR unknown command") && strings.Contains(strings.ToLower(msg), "fcall"):
		return failf(ErrNoFunctions, "the server has no FCALL (%s): Options.UseFunctions needs Redis 7.0 or later", msg)
	}
	return err
}

// FunctionLibrary returns the name of this version's Redis function
// library: "rbloom_" and 8 hex digits of a hash of its source. Its
// functions are that name followed by "_add", "_remove", "_rebuild",
// "_cuckoo" and "_window".
// Another version of rbloom has another name. It does not contact Redis.
func FunctionLibrary() string {
	return library.name
}

// InstallFunctions loads this version's function library into Redis
// (FUNCTION LOAD REPLACE), for handles with Options.UseFunctions: on the
// server rdb points to, on every master of a *redis.ClusterClient, or on
// every shard of a *redis.Ring. It needs Redis 7.0 or later and a user
// allowed FUNCTION LOAD: an admin runs it once per version of rbloom,
// before the application uses it, and again after adding a master to a
// cluster. Redis saves functions with the data and replicates them, so
// they survive restarts and failovers. Running it again is harmless, and
// the libraries of other versions of rbloom are left alone (delete one with
// FUNCTION DELETE when no process uses it any more).
func InstallFunctions(ctx context.Context, rdb Client) error {
	err := eachServer(ctx, rdb, func(ctx context.Context, c redis.Cmdable, addr string) error {
		if err := c.FunctionLoadReplace(ctx, library.code).Err(); err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		return nil
	})
	if err != nil {
		return callError("install functions", fmt.Errorf("%s: %w", library.name, err))
	}
	return nil
}

// ServerFunctions is what FunctionsStatus found of rbloom's function
// libraries on one Redis server.
type ServerFunctions struct {
	// Addr is the server's address, as the client knows it.
	Addr string
	// Loaded reports whether this version's library, FunctionLibrary(),
	// is loaded there with the code of this version.
	Loaded bool
	// Libraries are the names of every rbloom library loaded there, this
	// version's included, sorted: the others belong to other versions.
	Libraries []string
}

// FunctionsStatus reports, for the server rdb points to, or for every
// master of a *redis.ClusterClient (every shard of a *redis.Ring), whether
// this version's function library is loaded, sorted by address. It needs
// FUNCTION LIST. Writes with Options.UseFunctions work where Loaded is
// true.
func FunctionsStatus(ctx context.Context, rdb Client) ([]ServerFunctions, error) {
	var mu sync.Mutex
	var out []ServerFunctions
	err := eachServer(ctx, rdb, func(ctx context.Context, c redis.Cmdable, addr string) error {
		libs, err := c.FunctionList(ctx, redis.FunctionListQuery{WithCode: true}).Result()
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		s := ServerFunctions{Addr: addr}
		for _, l := range libs {
			if strings.HasPrefix(l.Name, "rbloom_") {
				s.Libraries = append(s.Libraries, l.Name)
				s.Loaded = s.Loaded || l.Name == library.name && l.Code == library.code
			}
		}
		slices.Sort(s.Libraries)
		mu.Lock()
		out = append(out, s)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, callError("functions status", err)
	}
	slices.SortFunc(out, func(a, b ServerFunctions) int { return strings.Compare(a.Addr, b.Addr) })
	return out, nil
}

// eachServer runs fn with a client of each server and its address: every
// master of a cluster or every shard of a ring, concurrently, or the one
// server of any other client.
func eachServer(ctx context.Context, rdb Client, fn func(ctx context.Context, c redis.Cmdable, addr string) error) error {
	node := func(ctx context.Context, c *redis.Client) error { return fn(ctx, c, c.Options().Addr) }
	switch c := rdb.(type) {
	case nil:
		return failf(ErrInvalidOptions, "nil Redis client")
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, node)
	case *redis.Ring:
		return c.ForEachShard(ctx, node)
	case *redis.Client:
		return node(ctx, c)
	case redis.Cmdable:
		return fn(ctx, c, "Redis")
	}
	return failf(ErrInvalidOptions, "%T cannot run FUNCTION commands", rdb)
}
