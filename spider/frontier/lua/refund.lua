-- ARGV: P, host.  One admitted URL less against the host's budget, never below zero.
local key = P .. 'h:' .. ARGV[2]
if tonumber(redis.call('HGET', key, 'admitted') or '0') > 0 then redis.call('HINCRBY', key, 'admitted', -1) end
return 1
