-- acquire_fetch: a worker is about to send one request to the source's site. Take a per_minute token
-- if the rolling window of fetch starts has room (retries and every worker included), else say how long
-- to wait. This, not admission, is what holds per_minute as the site sees it. A token counts for
-- window_seconds (already widened by the caller's margin: a request reaches the site a little after its token).
-- KEYS[1] window   KEYS[2] config   KEYS[3] counters
-- ARGV[1] window_seconds (s, the rate window plus the margin)   ARGV[2] now (s) or ""
-- Returns wait_seconds: 0 when the token was taken, else the seconds (s) until one may be.
local now = now_or_server(ARGV[2])
local window_seconds = tonumber(ARGV[1])
local per_minute = tonumber(redis.call('HGET', KEYS[2], 'per_minute') or '0')
if per_minute <= 0 then return '0' end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window_seconds)
if redis.call('ZCARD', KEYS[1]) >= per_minute then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return string.format('%.6f', math.max(0.001, tonumber(oldest[2]) + window_seconds - now))
end
local sequence = redis.call('HINCRBY', KEYS[3], 'fetch_starts', 1)
redis.call('ZADD', KEYS[1], now, sequence)
redis.call('PEXPIRE', KEYS[1], math.ceil(window_seconds * 1000) + 1000)
return '0'
