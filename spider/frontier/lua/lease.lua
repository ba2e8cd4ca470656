-- ARGV: P, now, max_urls, lease_s, owner, settle (1/0).  With settle: reaps expired leases and holds, queues due
-- recrawls and frees the busy hosts of dead workers; then hands out one URL per ready host, owned by `owner`.
-- Returns {id, host, payload, expires, delay, errors, blocked, admitted, host_lease} per URL; host_lease: the host's
-- leases so far, this one included (release.lua tells a lapsed lease's release by it).  settle 0 is for a partition
-- whose peek.lua at the same `now` found nothing overdue: its five range reads would find nothing either (~4 us of a
-- ~60 us call handing out two URLs), and what another client makes overdue meanwhile is settled by the next call.
local now, max_urls, lease_s, owner = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]  -- max_urls: a string
local settle = ARGV[6] ~= '0'
local now_ms = int(ms(now))  -- the times this call hands to Redis, as strings (int() in common.lua)
local expires = now + lease_s  -- every lease this call hands out ends then
local expires_ms, expires_s = int(ms(expires)), tostring(expires)
if settle then
  for _, zset in ipairs({'lease', 'held'}) do
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. zset, '-inf', now_ms, 'LIMIT', '0', '1000')) do
      redis.call('ZREM', P .. zset, id)
      redis.call('HDEL', P .. 'own', id)
      if requeue(id, now) then redis.call('HINCRBY', P .. 'stat', 'expired_leases', '1') end
    end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'due', '-inf', now_ms, 'LIMIT', '0', '1000')) do
    redis.call('ZREM', P .. 'due', id)
    requeue(id, now)
  end
  for _, host in ipairs(redis.call('ZRANGEBYSCORE', P .. 'busy', '-inf', now_ms, 'LIMIT', '0', '1000')) do
    redis.call('ZREM', P .. 'busy', host)  -- its worker died holding it
    redis.call('HDEL', P .. 'h:' .. host, 'owner')
    wake(host, now)
  end
end
-- The writes every URL needs go as one command each for the whole call (see add.lua).
local out, leased_hosts, leases, owners = {}, {}, {}, {}
local hosts = redis.call('ZRANGEBYSCORE', P .. 'ready', '-inf', now_ms, 'LIMIT', '0', max_urls)
if #hosts == 0 then return out end
call_many('ZREM', P .. 'ready', hosts)
for _, host in ipairs(hosts) do
  local popped = redis.call('ZPOPMIN', P .. 'q:' .. host)
  if #popped > 0 then
    local id = popped[1]
    local n = #leases
    leased_hosts[n + 1], leased_hosts[n + 2] = expires_ms, host
    leases[n + 1], leases[n + 2] = expires_ms, id
    owners[n + 1], owners[n + 2] = id, owner
    local hkey = P .. 'h:' .. host
    local h = redis.call('HMGET', hkey, 'delay', 'errors', 'blocked', 'admitted')
    local numbered = redis.call('HINCRBY', hkey, 'leases', '1')
    redis.call('HSET', hkey, 'owner', owner)
    local e = cjson.decode(redis.call('HGET', P .. 'e', id))
    out[#out + 1] = {id, host, e.p, expires_s, h[1] or '-1', h[2] or '0', h[3] or '0', h[4] or '0', int(numbered)}
  end
end
if #out > 0 then
  redis.call('HINCRBY', P .. 'stat', 'queued', int(-#out))
  call_many('ZADD', P .. 'busy', leased_hosts)
  call_many('ZADD', P .. 'lease', leases)
  call_many('HSET', P .. 'own', owners)
end
return out
