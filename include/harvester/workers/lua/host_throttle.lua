-- host_throttle: one batch's pages of one host are settled: `blocked` were block pages, `clean` were pages.
-- A block slows the host down (AutoThrottle's idea, with blocks where it has latency): its rate becomes half
-- of what it was (or of the requests the source started in its rate window, when it was not slowed yet), once
-- a batch however many of its pages were blocked (they were sent together), never below floor_per_minute; each
-- clean page raises it by
-- raise_factor, and at ceiling_per_minute (the source's own limit) the host is no longer slowed (field removed).
-- Blocks are also counted in a rolling window: pause_after blocks within it ask for a pause of the host (the
-- count restarts then). Quiet time recovers the rate too: it doubles every recovery_seconds since its last change
-- (a run that ended slowed does not start the next one slowed), so the stored value is "rate:time of the change".
-- Redis TIME is the clock.
-- KEYS[1] host_throttles (hash: host -> requests per minute)   KEYS[2] host_blocks (sorted set: member -> time, s)
-- KEYS[3] window (sorted set: the source's fetch starts, time in s)
-- ARGV[1] host   ARGV[2] blocked (count of pages)   ARGV[3] clean (count of pages)
-- ARGV[4] ceiling_per_minute (requests per minute)   ARGV[5] floor_per_minute (requests per minute)
-- ARGV[6] raise_factor (ratio per clean page, > 1)   ARGV[7] window_seconds (s, blocks counted)
-- ARGV[8] pause_after (count of blocks)   ARGV[9] rate_window_seconds (s, the window per_minute is counted over)
-- ARGV[10] recovery_seconds (s: the rate doubles every this much time without a change; 0 = only clean pages)
-- Returns {rate_per_minute (requests per minute, 0 = not slowed), blocks_in_window (count), pause (1 or 0)}
-- The blocks key expires window_seconds after the last block; the throttles hash keeps one field per slowed host,
-- "rate:time" (requests per minute : Redis time in s of the last change).
local now = server_now()
local host = ARGV[1]
local blocked, clean = tonumber(ARGV[2]), tonumber(ARGV[3])
local ceiling, floor = tonumber(ARGV[4]), tonumber(ARGV[5])
local raise, window, pause_after = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local rate_window, recovery = tonumber(ARGV[9]), tonumber(ARGV[10])
local rate = 0
local stored = redis.call('HGET', KEYS[1], host)
if stored then
  local value, changed = string.match(stored, '^([^:]+):?(.*)$')
  rate = tonumber(value) or 0
  changed = tonumber(changed) or now
  if recovery > 0 and now > changed then rate = rate * 2 ^ ((now - changed) / recovery) end
  if rate >= ceiling then
    rate = 0
    redis.call('HDEL', KEYS[1], host)
  end
end
local function keep(value) redis.call('HSET', KEYS[1], host, string.format('%.3f:%.6f', value, now)) end
local blocks, pause = 0, 0
if blocked > 0 then
  if rate <= 0 then
    local started = redis.call('ZCOUNT', KEYS[3], now - rate_window, '+inf')
    rate = math.min(ceiling, math.max(floor, started))
  end
  rate = math.max(floor, rate / 2)
  keep(rate)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  for index = 1, blocked do
    redis.call('ZADD', KEYS[2], now, string.format('%.6f:%d', now, index))
  end
  redis.call('PEXPIRE', KEYS[2], math.ceil(window * 1000))
  blocks = redis.call('ZCARD', KEYS[2])
  if blocks >= pause_after then
    pause = 1
    redis.call('DEL', KEYS[2])
  end
elseif clean > 0 and rate > 0 then
  rate = rate * (raise ^ clean)
  if rate >= ceiling then
    rate = 0
    redis.call('HDEL', KEYS[1], host)
  else
    keep(rate)
  end
end
return {string.format('%.3f', rate), blocks, pause}
