-- ARGV: P, owner, (id, payload) pairs: a URL's new payload (a retry's count), kept with its place in the queue;
-- only for the owner's own leases and holds.
local owner = ARGV[2]
for i = 3, #ARGV, 2 do
  local raw = redis.call('HGET', P .. 'e', ARGV[i])
  if raw and mine(ARGV[i], owner) then
    local e = cjson.decode(raw)
    e.p = ARGV[i + 1]
    redis.call('HSET', P .. 'e', ARGV[i], cjson.encode(e))
  end
end
return 1
