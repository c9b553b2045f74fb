-- restoreunlock.lua: release the restore lock of a filter's name
-- (restore.go), if the restore given holds it.
--
-- KEYS[1]   the lock (the root partition's key .. ':restoring')
-- ARGV[1]   the restore's token
-- Returns   'released', or 'kept' when another restore holds it or it
--           expired (nothing changed)

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 'released'
end
return 'kept'
