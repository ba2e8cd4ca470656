-- ARGV: P, op, now, until_or_refetch, ids...   op: requeue | fetched | renew | ack.  Returns how many changed.
local op, now, t = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local n = 0
for i = 5, #ARGV do
  local id = ARGV[i]
  if op == 'renew' then
    local leased = redis.call('ZADD', P .. 'lease', 'XX', 'CH', t, id)
    n = n + leased + redis.call('ZADD', P .. 'held', 'XX', 'CH', t, id)
    if leased == 1 then  -- the host stays busy as long as the fetch's lease
      local raw = redis.call('HGET', P .. 'e', id)
      if raw then redis.call('ZADD', P .. 'busy', 'XX', t, cjson.decode(raw).h) end
    end
  elseif op == 'fetched' then
    if redis.call('ZREM', P .. 'lease', id) == 1 then
      redis.call('ZADD', P .. 'held', t, id); n = n + 1
    end
  else
    local out = redis.call('ZREM', P .. 'lease', id) + redis.call('ZREM', P .. 'held', id)
    if out > 0 then
      n = n + 1
      if op == 'requeue' then
        requeue(id, now)
      elseif t ~= '' then
        redis.call('ZADD', P .. 'due', tonumber(t), id)
      else
        redis.call('HDEL', P .. 'e', id)
      end
    end
  end
end
return n
