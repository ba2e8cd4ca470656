-- ARGV: P, host, next_at, now, owner, [delay, errors, blocked].  Returns 0 (nothing changed) when the host is busy
-- with another owner's lease: the caller's own lease of it expired and the host was handed out again.  A host that
-- is not busy and already has a later next-allowed time keeps it, and its politeness record with it.
local host, next_at, now, owner = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local hkey = P .. 'h:' .. host
local holder = redis.call('HGET', hkey, 'owner')
local busy = redis.call('ZSCORE', P .. 'busy', host)
if holder and holder ~= owner and busy then return 0 end
local newer = false
if not busy then
  -- Nobody holds the host: this is a late release from a worker whose lease of it expired, and another worker may
  -- have fetched from the host since.  It must not make the host due before that fetch's delay has passed, nor put
  -- its older politeness record over the one that fetch left.
  local stored = tonumber(redis.call('HGET', hkey, 'next') or '0')
  if stored > next_at then next_at, newer = stored, true end
end
redis.call('HDEL', hkey, 'owner')
if ARGV[6] and not newer then
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
