-- ARGV: P, now, max_per_host, layout key, nstages, (blocks, k, line bits, cumulative capacity, lines) x nstages,
--       then per URL: id, host, priority, payload, hashes a, b, c, d, in scope (1/0).  One outcome per URL.
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
  local i = 6 + 5 * s
  stages[s] = {tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]),
               tonumber(ARGV[i + 4])}
end
local admitted = tonumber(redis.call('HGET', P .. 'bm', 'admitted') or '0')
local function stage_for(n)
  for s = 0, nstages - 1 do if n < stages[s][4] then return s end end
  return -1
end
-- BloomLayout Stage.positions, exact in doubles: the URL's block, the offset of its line's first byte in the block,
-- and its bits in that line (enhanced triple hashing; before lines, enhanced double hashing over the whole block).
local function bits(s, a, b, c, d)
  local st = stages[s]
  local m, lines = st[3], st[5]
  local key = P .. 'bf:' .. s .. ':' .. (a % st[1])
  local out, x, y = {}, b % m, c % m
  if lines == 1 then
    for i = 0, st[2] - 1 do
      out[#out + 1] = x
      x = (x + y) % m
      y = (y + i + 1) % m
    end
    return key, 0, out
  end
  local z = math.floor(d / lines) % m
  for i = 0, st[2] - 1 do
    out[#out + 1] = x
    x = (x + y) % m
    y = (y + z) % m
    z = (z + i + 1) % m
  end
  return key, d % lines * m / 8, out  -- bits counted from the line's first byte
end
-- Whether a stage has all of a URL's bits.  One GETBIT answers most new URLs (their first bit is clear); then the line
-- is read in one GETRANGE and tested here, where a GETBIT a bit cost ~1 us each.  (Writing a line back whole costs
-- more than a SETBIT a bit: Lua makes and collects a 1 KB string.)  Bit o is byte o // 8, mask 0x80 >> o % 8.
local byte, band, rshift, floor = string.byte, bit.band, bit.rshift, math.floor
local function has_all(key, first, st, offsets)
  if redis.call('GETBIT', key, int(first * 8 + offsets[1])) == 0 then return false end
  if st[5] == 1 then  -- before lines: the line is the whole 64 KB block, too much to copy for one URL
    for i = 2, #offsets do if redis.call('GETBIT', key, int(offsets[i])) == 0 then return false end end
    return true
  end
  local line = redis.call('GETRANGE', key, int(first), int(first + st[3] / 8 - 1))
  for i = 2, #offsets do
    local o = offsets[i]
    if band(byte(line, floor(o / 8) + 1), rshift(128, o % 8)) == 0 then return false end
  end
  return true
end

-- Per-call tallies, written once at the end: a redis.call costs ~1.2 us of Lua overhead before its command runs, and a
-- batch's URLs mostly share a few hosts (a page's links).
local out, queued, host_admitted, in_scope, made = {}, 0, {}, {}, {}  -- host_admitted: host -> {before, added}
local seq = nil
local pos = 6 + 5 * nstages
while pos <= #ARGV do
  local id, host, prio, payload = ARGV[pos], ARGV[pos + 1], tonumber(ARGV[pos + 2]), ARGV[pos + 3]
  local a, b, c, d = tonumber(ARGV[pos + 4]), tonumber(ARGV[pos + 5]), tonumber(ARGV[pos + 6]), tonumber(ARGV[pos + 7])
  local scoped = ARGV[pos + 8] == '1'
  if not scoped then
    if in_scope[host] == nil then in_scope[host] = redis.call('SISMEMBER', P .. 'scope', host) == 1 end
    scoped = in_scope[host]
  end
  pos = pos + 9
  local current = stage_for(admitted)
  if current < 0 then return redis.error_reply('the URL Bloom filter is full: raise frontier.bloom_capacity') end
  local seen, key, first, offsets = false, nil, 0, nil  -- the last stage tested: the URL's block, line and bits
  for s = 0, (scoped and current or -1) do
    key, first, offsets = bits(s, a, b, c, d)
    if has_all(key, first, stages[s], offsets) then seen = true; break end
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
      redis.call('SET', key, string.rep('\0', stages[current][3] * stages[current][5] / 8))
    end
    made[key] = true
    -- the offset through int(), the bit as '1': see int() in common.lua.  One BITFIELD SET for all k bits was no
    -- faster (bench/frontier_scripts_ab.py, 2026-12-05: add new 51.2 -> 50.6 us of redis-server CPU a URL, noise):
    -- of a new URL's ~49 us of Lua, formatting its offsets costs ~4.6 us and the bit commands ~7.6 us either way;
    -- the rest is spread over its entry (HSET + cjson ~6), its queue (ZADD ~6), waking its host (~5) and the code
    for _, o in ipairs(offsets) do redis.call('SETBIT', key, int(first * 8 + o), '1') end
    admitted = admitted + 1
    if not counted then counted = {0, 0}; host_admitted[host] = counted end
    counted[2] = counted[2] + 1
    seq = (seq or tonumber(redis.call('GET', P .. 'seq') or '0')) + 1
    local score = -prio * 1e10 + seq
    -- s stays a number in the entry: as a string, its quotes put an entry in jemalloc's next size class (201 -> 219 B
    -- per queued URL, bench/frontier_ops.py --only memory)
    redis.call('HSET', P .. 'e', id, cjson.encode({h = host, s = score, p = payload}))
    redis.call('ZADD', P .. 'q:' .. host, int(score), id)
    queued = queued + 1
    out[#out + 1] = 'admitted'
  end
end
for host, counted in pairs(host_admitted) do
  if counted[2] > 0 then
    redis.call('HINCRBY', P .. 'h:' .. host, 'admitted', int(counted[2]))
    wake(host, now, true)
  end
end
if seq then redis.call('SET', P .. 'seq', string.format('%d', seq)) end
if queued > 0 then redis.call('HINCRBY', P .. 'stat', 'queued', queued) end
redis.call('HSET', P .. 'bm', 'admitted', admitted)
return out
