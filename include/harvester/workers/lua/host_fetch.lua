-- host_fetch: a worker is about to send one request to a host. Take a token if the host's rolling window of
-- request starts has room (per_host_per_minute), the last start is at least min_interval ago (robots.txt
-- Crawl-delay / Request-rate) and fewer than max_in_flight requests are in flight there (per_host_max_active);
-- else say how long to wait.
-- Counted when the request starts, across every worker and retry, with the Redis server's clock (TIME).
-- KEYS[1] host_fetch_window (sorted set: token -> start time, s)   KEYS[2] host_fetch_active (sorted set: token -> deadline, s)
-- ARGV[1] token   ARGV[2] per_minute (count, 0 = none)   ARGV[3] window_seconds (s)
-- ARGV[4] min_interval_seconds (s, 0 = none)   ARGV[5] max_in_flight (count of requests, 0 = none)
-- ARGV[6] hold_seconds (s): an unreleased in-flight token expires after this
-- Returns wait_seconds: a string (s), "0" when the token was taken, else the seconds until one may be.
-- Both keys expire (window + 1 s, hold + 1 s after the last start) and hold at most max(per_minute, window /
-- min_interval, max_in_flight) members: trimmed on every call.
local now = server_now()
local token = ARGV[1]
local per_minute, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local min_interval, max_in_flight, hold = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local span = math.max(window, min_interval)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - span)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local wait = 0
if max_in_flight > 0 and redis.call('ZCARD', KEYS[2]) >= max_in_flight then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  wait = math.max(wait, math.min(0.05, tonumber(first[2]) - now))
end
if per_minute > 0 then
  local started = redis.call('ZCOUNT', KEYS[1], now - window, '+inf')
  if started >= per_minute then
    local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], now - window, '+inf', 'WITHSCORES', 'LIMIT', started - per_minute, 1)
    wait = math.max(wait, tonumber(oldest[2]) + window - now)
  end
end
if min_interval > 0 then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then wait = math.max(wait, tonumber(last[2]) + min_interval - now) end
end
if wait > 0 then return string.format('%.6f', math.max(wait, 0.001)) end
if per_minute > 0 or min_interval > 0 then
  redis.call('ZADD', KEYS[1], now, token)
  redis.call('PEXPIRE', KEYS[1], math.ceil(span * 1000) + 1000)
end
if max_in_flight > 0 then
  redis.call('ZADD', KEYS[2], now + hold, token)
  redis.call('PEXPIRE', KEYS[2], math.ceil(hold * 1000) + 1000)
end
return '0'
