-- ARGV: P.  A partition written before its times were milliseconds (their scores were seconds, below 1e11 until the
-- year 5138; milliseconds pass 1e12 from 2001): each such score is rescaled, so an upgrade keeps every host's
-- politeness wait and every lease.  Safe to run again: a millisecond score is never rescaled.  Returns how many.
local n = 0
for _, zset in ipairs({'ready', 'busy', 'lease', 'held', 'due'}) do
  local old = redis.call('ZRANGEBYSCORE', P .. zset, '-inf', '(1e11', 'WITHSCORES')
  for i = 1, #old, 2 do
    redis.call('ZADD', P .. zset, ms(tonumber(old[i + 1])), old[i])
  end
  n = n + #old / 2
end
return n
