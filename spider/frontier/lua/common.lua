-- Shared by every frontier script; one partition's keys all carry the same hash tag, so a script touches one slot.
-- P = ARGV[1], the partition's key prefix "<namespace>:{<partition>}:".
local P = ARGV[1]

-- Every time in a sorted set (ready, busy, lease, held, due) is a whole number of milliseconds: Redis keeps a small
-- sorted set's whole scores as integers, and parses every other score it passes with strtod, at each ZADD and
-- ZRANGEBYSCORE (a ZADD into 50 members took 12.7 us with fractional scores, 2.6 us with whole ones; redis-server
-- 7.0).  Times kept and `now` are cut to the same millisecond, so whatever is due at `now` is found: a time at most a
-- millisecond later may come with it.
local function ms(t) return math.floor(t * 1000) end

-- Redis formats every number a script hands to redis.call with snprintf("%.17g") before the command runs, at a cost
-- of the order of a small command's: 4 ZRANGEBYSCOREs took 1.6-2.4x as long with numbers as with strings, 21 SETBITs
-- 1.3-3.6x (six runs of bench/frontier_scripts_ab.py --arguments, redis 7.0, on a noisy 2-core VM).  So the scripts
-- pass strings: literals quoted, ARGV as it came, and a number they compute formatted with int(), whose '%d' costs
-- under half of tostring's '%.14g'.
local function int(n) return string.format('%d', n) end

-- One command over a list of arguments of any length (members, score-member or field-value pairs), in as few calls as
-- Lua's unpack() allows: it is bounded by the C stack (~8,000 values).
local function call_many(cmd, key, args)
  for i = 1, #args, 4000 do redis.call(cmd, key, unpack(args, i, math.min(i + 3999, #args))) end
end

-- An idle or waiting host with URLs queued is in `ready`, scored by its next-allowed time; a busy one is in `busy`.
-- `queued`: the caller has just queued URLs of the host (its queue is not empty).
local function wake(host, now, queued)
  if redis.call('ZSCORE', P .. 'busy', host) then return end
  if not queued and redis.call('ZCARD', P .. 'q:' .. host) == 0 then
    redis.call('ZREM', P .. 'ready', host)
    return
  end
  if redis.call('ZSCORE', P .. 'ready', host) then return end
  local next_at = tonumber(redis.call('HGET', P .. 'h:' .. host, 'next') or '0')
  redis.call('ZADD', P .. 'ready', int(ms(math.max(now, next_at))), host)
end

-- Whether `owner` may change the lease or hold of `id`: its own, or one taken before leases had owners.
-- An empty `owner` stands for anyone (the acknowledgement of a recovered WARC file).
local function mine(id, owner)
  if owner == '' then return true end
  local holder = redis.call('HGET', P .. 'own', id)
  return (not holder) or holder == owner
end

-- Put a known entry back in its host's queue under its original score.
local function requeue(id, now)
  local raw = redis.call('HGET', P .. 'e', id)
  if not raw then return false end
  local e = cjson.decode(raw)
  if redis.call('ZADD', P .. 'q:' .. e.h, 'NX', e.s, id) == 1 then
    redis.call('HINCRBY', P .. 'stat', 'queued', '1')
  end
  wake(e.h, now, true)
  return true
end
