-- ARGV: P, host, next_at, now, owner, [delay, errors, blocked].  Returns 0 (nothing changed) when the host is busy
-- with another owner's lease: the caller's own lease of it expired and the host was handed out again.
local host, next_at, now, owner = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local hkey = P .. 'h:' .. host
local holder = redis.call('HGET', hkey, 'owner')
if holder and holder ~= owner and redis.call('ZSCORE', P .. 'busy', host) then return 0 end
redis.call('HDEL', hkey, 'owner')
if ARGV[6] then
  redis.call('HSET', hkey, 'next', next_at, 'delay', ARGV[6], 'errors', ARGV[7], 'blocked', ARGV[8])
else
  redis.call('HSET', hkey, 'next', next_at)
end
redis.call('ZREM', P .. 'busy', host)
-- wake() without its lookups: the host is no longer busy, and its next-allowed time is next_at
if redis.call('ZCARD', P .. 'q:' .. host) > 0 then
  redis.call('ZADD', P .. 'ready', ms(math.max(now, next_at)), host)
else
  redis.call('ZREM', P .. 'ready', host)
end
return 1
