-- ARGV: P, host, next_at, now, owner, host_lease ('' when the caller does not know it), [delay, errors, blocked].
-- Returns 0 (nothing changed) when the host is busy with another lease: the caller's own lease of it lapsed and the
-- host was handed out again.  A host that is not busy keeps a later next-allowed time, and its politeness record
-- when it was leased since the caller's lease (told by host_lease, or without it by the later next-allowed time).
local host, next_at, now, owner, numbered = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
local hkey = P .. 'h:' .. host
local h = redis.call('HMGET', hkey, 'owner', 'leases')
local busy = redis.call('ZSCORE', P .. 'busy', host)
local current, keep_record  -- current: no lease of the host since the caller's (not named: the caller holds it)
if numbered == '' then
  current = (not h[1]) or h[1] == owner
else
  current = tonumber(numbered) == tonumber(h[2] or '0')
  keep_record = not current
end
if busy and not current then return 0 end
if not busy then
  -- Nobody holds the host: this is a late release from a worker whose lease of it expired, and another worker may
  -- have fetched from the host since.  It must not make the host due before that fetch's delay has passed, nor put
  -- its older politeness record over the one that fetch left.
  local stored = tonumber(redis.call('HGET', hkey, 'next') or '0')
  if stored > next_at then
    next_at = stored
    if numbered == '' then keep_record = true end
  end
end
redis.call('HDEL', hkey, 'owner')
if ARGV[7] and not keep_record then
  redis.call('HSET', hkey, 'next', next_at, 'delay', ARGV[7], 'errors', ARGV[8], 'blocked', ARGV[9])
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
