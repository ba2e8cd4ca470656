-- ARGV: P, host, next_at, now, [delay, errors, blocked]
local host, next_at, now = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local hkey = P .. 'h:' .. host
redis.call('HSET', hkey, 'next', next_at)
if ARGV[5] then redis.call('HSET', hkey, 'delay', ARGV[5], 'errors', ARGV[6], 'blocked', ARGV[7]) end
redis.call('ZREM', P .. 'busy', host)
redis.call('ZREM', P .. 'ready', host)
wake(host, now)
return 1
