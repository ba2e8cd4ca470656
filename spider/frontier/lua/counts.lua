-- ARGV: P, now.  One partition's gauges for counts(), in one command:
-- {queued, expired_leases, robots_parsed, robots_allow_all, robots_disallow_all,
--  leased, held, ready_hosts, waiting_hosts, busy_hosts, due, seen}.
local now = ms(tonumber(ARGV[2]))
local stat = redis.call('HMGET', P .. 'stat', 'queued', 'expired_leases', 'robots_parsed', 'robots_allow_all',
                        'robots_disallow_all')
local out = {}
for i = 1, #stat do out[i] = tonumber(stat[i] or '0') end
out[#out + 1] = redis.call('ZCARD', P .. 'lease')
out[#out + 1] = redis.call('ZCARD', P .. 'held')
out[#out + 1] = redis.call('ZCOUNT', P .. 'ready', '-inf', now)
out[#out + 1] = redis.call('ZCOUNT', P .. 'ready', '(' .. now, '+inf')
out[#out + 1] = redis.call('ZCARD', P .. 'busy')
out[#out + 1] = redis.call('ZCARD', P .. 'due')
out[#out + 1] = tonumber(redis.call('HGET', P .. 'bm', 'admitted') or '0')
return out
