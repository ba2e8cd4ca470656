-- ARGV: P, now, max.  What lease() looks at first, for one partition in one command: the scores (next-allowed
-- times) of up to `max` hosts ready by `now`, and whether a lease, hold, recrawl or busy host is overdue there
-- (then lease.lua must settle it before it hands anything out).  The scores are milliseconds, as strings.
local now, max = int(ms(tonumber(ARGV[2]))), ARGV[3]  -- strings: see int() in common.lua
local ready = redis.call('ZRANGEBYSCORE', P .. 'ready', '-inf', now, 'WITHSCORES', 'LIMIT', '0', max)
local overdue = 0
for _, zset in ipairs({'lease', 'held', 'due', 'busy'}) do
  if #redis.call('ZRANGEBYSCORE', P .. zset, '-inf', now, 'LIMIT', '0', '1') > 0 then
    overdue = 1
    break
  end
end
local scores = {}
for i = 2, #ready, 2 do scores[#scores + 1] = ready[i] end
return {overdue, scores}
