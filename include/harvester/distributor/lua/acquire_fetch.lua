-- acquire_fetch: a worker is about to send `count` requests to the source's site (the pages of one batch
-- asking in the same event-loop turn, or one page). Take as many per_minute tokens as the rolling window of
-- fetch starts has room for, up to count (retries and every worker included), each its own window member
-- with its own fetch_starts sequence; when not all could be taken, say how long until the next one may be.
-- This, not admission, is what holds per_minute as the site sees it. A token counts for window_seconds
-- (already widened by the caller's margin: a request reaches the site a little after its token).
-- The leases of the requests' tasks (when given, one pair per request) are looked at in the same call: a
-- request whose task is no longer held under its token, or whose lease expired (the reaper may hand it on
-- at any moment, or did), gets no token and is named in the reply. A worker learns it lost a lease here,
-- right before it would fetch, not only from its next heartbeat (after a Redis outage longer than the lease
-- the old holder's first call could otherwise take a token while the new holder fetches the same task).
-- KEYS[1] window   KEYS[2] config   KEYS[3] counters   KEYS[4] leases   KEYS[5] active
-- ARGV[1] window_seconds (s, the rate window plus the margin)   ARGV[2] count (count, tokens wanted, >= 1)
-- ARGV[3] now (s) or ""   ARGV[4..] leases (task id, token, ...: the requests' tasks; none for no check)
-- Returns {granted (count, 0..count less the lost), wait_seconds (s, 0 when all were granted, else until the
-- next token), lost... (task ids not held: their requests must not start)}
local now = now_or_server(ARGV[3])
local window_seconds = tonumber(ARGV[1])
local wanted = math.floor(tonumber(ARGV[2]) or 0)
if wanted < 1 then return redis.error_reply('acquire_fetch: count must be at least 1, got ' .. tostring(ARGV[2])) end
local lost = {}
for i = 4, #ARGV - 1, 2 do
  local held, state = holds(KEYS[4], ARGV[i], ARGV[i + 1])
  local deadline = tonumber(redis.call('ZSCORE', KEYS[5], ARGV[i]) or '0')
  if not (held and state == 's' and deadline > now) then
    lost[#lost + 1] = ARGV[i]
  end
end
wanted = wanted - #lost
local function reply(granted, wait)
  local answer = {granted, wait}
  for _, task_id in ipairs(lost) do answer[#answer + 1] = task_id end
  return answer
end
if wanted < 1 then return reply(0, '0') end
local per_minute = tonumber(redis.call('HGET', KEYS[2], 'per_minute') or '0')
if per_minute <= 0 then return reply(wanted, '0') end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window_seconds)
local taken = redis.call('ZCARD', KEYS[1])
local granted = math.max(0, math.min(wanted, per_minute - taken))
if granted > 0 then
  local last = redis.call('HINCRBY', KEYS[3], 'fetch_starts', granted)
  for sequence = last - granted + 1, last do
    redis.call('ZADD', KEYS[1], now, sequence)
  end
  redis.call('PEXPIRE', KEYS[1], math.ceil(window_seconds * 1000) + 1000)
  taken = taken + granted
end
if granted == wanted then return reply(granted, '0') end
-- the window is full: the next token is free when the member that makes room leaves it (the oldest, or a
-- later one when per_minute was lowered below what the window already holds)
local making_room = redis.call('ZRANGE', KEYS[1], taken - per_minute, taken - per_minute, 'WITHSCORES')
return reply(granted, string.format('%.6f', math.max(0.001, tonumber(making_room[2]) + window_seconds - now)))
