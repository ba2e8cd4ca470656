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

-- Per-call tallies, written once at the end: a redis.call costs ~1.2 us of Lua overhead before its command runs, and a
-- batch's URLs mostly share a few hosts (a page's links).
local out, queued, host_admitted, in_scope, made = {}, 0, {}, {}, {}  -- host_admitted: host -> {before, added}
local seq = nil
local pos = 6 + 4 * nstages
while pos <= #ARGV do
  local id, host, prio, payload = ARGV[pos], ARGV[pos + 1], tonumber(ARGV[pos + 2]), ARGV[pos + 3]
  local a, b, c = tonumber(ARGV[pos + 4]), tonumber(ARGV[pos + 5]), tonumber(ARGV[pos + 6])
  local scoped = ARGV[pos + 7] == '1'
  if not scoped then
    if in_scope[host] == nil then in_scope[host] = redis.call('SISMEMBER', P .. 'scope', host) == 1 end
    scoped = in_scope[host]
  end
  pos = pos + 8
  local current = stage_for(admitted)
  if current < 0 then return redis.error_reply('the URL Bloom filter is full: raise frontier.bloom_capacity') end
  local seen, key, offsets, unset = false, nil, nil, 1  -- the current stage's key and bits, the first one not yet set
  for s = 0, (scoped and current or -1) do
    key, offsets = bits(s, a, b, c)
    unset = #offsets + 1
    for i, o in ipairs(offsets) do
      if redis.call('GETBIT', key, o) == 0 then unset = i; break end
    end
    if unset > #offsets then seen = true; break end
  end
  local counted = host_admitted[host]
  if scoped and not seen and budget > 0 and not counted then
    counted = {tonumber(redis.call('HGET', P .. 'h:' .. host, 'admitted') or '0'), 0}
    host_admitted[host] = counted
  end
  if not scoped then
    out[#out + 1] = 'offsite'
  elseif seen then
    out[#out + 1] = 'seen'
  elseif budget > 0 and counted[1] + counted[2] >= budget then
    out[#out + 1] = 'host_budget'
  else
    if not made[key] and redis.call('EXISTS', key) == 0 then  -- full size at once: SETBIT's growth would over-allocate
      redis.call('SET', key, string.rep('\0', stages[current][3] / 8))
    end
    made[key] = true
    for i = unset, #offsets do redis.call('SETBIT', key, offsets[i], 1) end
    admitted = admitted + 1
    if not counted then counted = {0, 0}; host_admitted[host] = counted end
    counted[2] = counted[2] + 1
    seq = (seq or tonumber(redis.call('GET', P .. 'seq') or '0')) + 1
    local score = -prio * 1e10 + seq
    redis.call('HSET', P .. 'e', id, cjson.encode({h = host, s = score, p = payload}))
    redis.call('ZADD', P .. 'q:' .. host, score, id)
    queued = queued + 1
    out[#out + 1] = 'admitted'
  end
end
for host, counted in pairs(host_admitted) do
  if counted[2] > 0 then
    redis.call('HINCRBY', P .. 'h:' .. host, 'admitted', counted[2])
    wake(host, now)
  end
end
if seq then redis.call('SET', P .. 'seq', string.format('%d', seq)) end
if queued > 0 then redis.call('HINCRBY', P .. 'stat', 'queued', queued) end
redis.call('HSET', P .. 'bm', 'admitted', admitted)
return out
