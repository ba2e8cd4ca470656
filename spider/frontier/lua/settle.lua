-- ARGV: P, op, now, until_or_refetch, owner, ids...   op: requeue | fetched | renew | ack | deny (an ack that also
-- refunds the URL from its host's budget).  Only the owner's leases and holds change (an empty owner: anyone's).
-- Returns the ids that changed.
local op, now, t, owner = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
if t ~= '' then t = ms(tonumber(t)) end  -- the lease, hold or recrawl time
local changed = {}
for i = 6, #ARGV do
  local id = ARGV[i]
  if not mine(id, owner) then
    -- another worker leased it after this caller's lease expired: not this caller's to change
  elseif op == 'renew' then
    if redis.call('ZSCORE', P .. 'lease', id) then
      redis.call('ZADD', P .. 'lease', t, id)
      local raw = redis.call('HGET', P .. 'e', id)  -- the host stays busy as long as the fetch's lease
      if raw then redis.call('ZADD', P .. 'busy', 'XX', t, cjson.decode(raw).h) end
      changed[#changed + 1] = id
    elseif redis.call('ZSCORE', P .. 'held', id) then
      redis.call('ZADD', P .. 'held', t, id)
      changed[#changed + 1] = id
    end
  elseif op == 'fetched' then
    if redis.call('ZREM', P .. 'lease', id) == 1 then
      redis.call('ZADD', P .. 'held', t, id)
      changed[#changed + 1] = id
    end
  else
    local out = redis.call('ZREM', P .. 'lease', id) + redis.call('ZREM', P .. 'held', id)
    if out > 0 then
      changed[#changed + 1] = id
      redis.call('HDEL', P .. 'own', id)
      local raw = op == 'deny' and redis.call('HGET', P .. 'e', id)
      if raw then  -- never below zero
        local key = P .. 'h:' .. cjson.decode(raw).h
        if tonumber(redis.call('HGET', key, 'admitted') or '0') > 0 then redis.call('HINCRBY', key, 'admitted', -1) end
      end
      if op == 'requeue' then
        requeue(id, now)
      elseif t ~= '' then
        redis.call('ZADD', P .. 'due', t, id)
      else
        redis.call('HDEL', P .. 'e', id)
      end
    end
  end
end
return changed
