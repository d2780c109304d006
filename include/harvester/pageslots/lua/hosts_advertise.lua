-- hosts_advertise: a slot host says how many slots it can host, for ARGV[3] seconds (its heartbeat);
-- a capacity of 0 withdraws it. Hosts past their deadline are forgotten.
-- KEYS[1] hosts (zset host -> deadline, s)   KEYS[2] host_capacity (hash host -> slots)
-- ARGV[1] host ('' = only read)   ARGV[2] capacity (count of slots)   ARGV[3] ttl_seconds (s, time to live)
-- Returns {live_capacity (count of slots), live_hosts (count)}
local hosts, capacity = KEYS[1], KEYS[2]
local host, slots, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = server_now()
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', hosts, '-inf', now)) do
  redis.call('ZREM', hosts, gone)
  redis.call('HDEL', capacity, gone)
end
if host ~= '' then
  if slots > 0 then
    redis.call('ZADD', hosts, now + ttl, host)
    redis.call('HSET', capacity, host, slots)
  else
    redis.call('ZREM', hosts, host)
    redis.call('HDEL', capacity, host)
  end
end
local total = 0
for _, value in ipairs(redis.call('HVALS', capacity)) do total = total + tonumber(value) end
return {total, redis.call('ZCARD', hosts)}
