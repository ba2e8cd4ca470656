-- ARGV: P, now, max_per_host, layout key, nstages, (blocks, k, block_bits, cumulative capacity) x nstages,
--       then per URL: id, host, priority, payload, hash a, hash b, hash c, in scope (1/0).  One outcome per URL.
local now, budget, layout, nstages = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local stored = redis.call('HGET', P .. 'bm', 'layout')
if not stored then
  redis.call('HSET', P .. 'bm', 'layout', layout)
elseif stored ~= layout then
  return redis.error_reply('this frontier was built with the Bloom layout "' .. stored .. '", not "' .. layout ..
    '": its URLs would look new again; restore frontier.bloom_capacity/bloom_fp_rate/partitions or start over ' ..
    'with --fresh-frontier')
end
local stages = {}
for s = 0, nstages - 1 do
  local i = 6 + 4 * s
  stages[s] = {tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])}
end
local admitted = tonumber(redis.call('HGET', P .. 'bm', 'admitted') or '0')
local function stage_for(n)
  for s = 0, nstages - 1 do if n < stages[s][4] then return s end end
  return -1
end
local function bits(s, a, b, c)  -- BloomLayout Stage.positions: enhanced double hashing, exact in doubles
  local st = stages[s]
  local m = st[3]
  local x, y = b % m, c % m
  local key = P .. 'bf:' .. s .. ':' .. (a % st[1])
  local out = {}
  for i = 0, st[2] - 1 do
    out[#out + 1] = x
    x = (x + y) % m
    y = (y + i + 1) % m
  end
  return key, out
end

local out = {}
local pos = 6 + 4 * nstages
while pos <= #ARGV do
  local id, host, prio, payload = ARGV[pos], ARGV[pos + 1], tonumber(ARGV[pos + 2]), ARGV[pos + 3]
  local a, b, c = tonumber(ARGV[pos + 4]), tonumber(ARGV[pos + 5]), tonumber(ARGV[pos + 6])
  local scoped = ARGV[pos + 7] == '1' or redis.call('SISMEMBER', P .. 'scope', host) == 1
  pos = pos + 8
  local current = stage_for(admitted)
  if current < 0 then return redis.error_reply('the URL Bloom filter is full: raise frontier.bloom_capacity') end
  local seen = false
  for s = 0, (scoped and current or -1) do
    local key, offsets = bits(s, a, b, c)
    local all = true
    for _, o in ipairs(offsets) do
      if redis.call('GETBIT', key, o) == 0 then all = false; break end
    end
    if all then seen = true; break end
  end
  local hkey = P .. 'h:' .. host
  if not scoped then
    out[#out + 1] = 'offsite'
  elseif seen then
    out[#out + 1] = 'seen'
  elseif budget > 0 and tonumber(redis.call('HGET', hkey, 'admitted') or '0') >= budget then
    out[#out + 1] = 'host_budget'
  else
    local key, offsets = bits(current, a, b, c)
    if redis.call('EXISTS', key) == 0 then  -- full size at once: SETBIT's growth would over-allocate
      redis.call('SET', key, string.rep('\0', stages[current][3] / 8))
    end
    for _, o in ipairs(offsets) do redis.call('SETBIT', key, o, 1) end
    admitted = admitted + 1
    redis.call('HINCRBY', hkey, 'admitted', 1)
    local score = -prio * 1e10 + redis.call('INCR', P .. 'seq')
    redis.call('HSET', P .. 'e', id, cjson.encode({h = host, s = score, p = payload}))
    redis.call('ZADD', P .. 'q:' .. host, score, id)
    redis.call('HINCRBY', P .. 'stat', 'queued', 1)
    wake(host, now)
    out[#out + 1] = 'admitted'
  end
end
redis.call('HSET', P .. 'bm', 'admitted', admitted)
return out
