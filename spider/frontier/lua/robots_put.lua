-- ARGV: P, host, status, body, fetched_at, expires, detail[, tdm: the host's tdmrep.json as asked with it; absent:
-- not asked].  Keeps per-status counts for the metrics.
local key = P .. 'r:' .. ARGV[2]
local old = redis.call('HGET', key, 'status')
if old then redis.call('HINCRBY', P .. 'stat', 'robots_' .. old, '-1') end
redis.call('HSET', key, 'status', ARGV[3], 'body', ARGV[4], 'fetched', ARGV[5], 'expires', ARGV[6], 'detail', ARGV[7])
if ARGV[8] then redis.call('HSET', key, 'tdm', ARGV[8]) else redis.call('HDEL', key, 'tdm') end
redis.call('HINCRBY', P .. 'stat', 'robots_' .. ARGV[3], '1')
return 1
