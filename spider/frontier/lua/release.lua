-- ARGV: P, host, next_at, now, owner, [delay, errors, blocked].  Returns 0 (nothing changed) when the host is busy
-- with another owner's lease: the caller's own lease of it expired and the host was handed out again.
local host, next_at, now, owner = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local hkey = P .. 'h:' .. host
local holder = redis.call('HGET', hkey, 'owner')
if holder and holder ~= owner and redis.call('ZSCORE', P .. 'busy', host) then return 0 end
redis.call('HDEL', hkey, 'owner')
redis.call('HSET', hkey, 'next', next_at)
if ARGV[6] then redis.call('HSET', hkey, 'delay', ARGV[6], 'errors', ARGV[7], 'blocked', ARGV[8]) end
redis.call('ZREM', P .. 'busy', host)
redis.call('ZREM', P .. 'ready', host)
wake(host, now)
return 1
