-- host_breaker: one batch's pages of one host are settled: `unreachable` could not reach it (refused, DNS failing,
-- connect or first-byte timeout), `reached` got any response. A response closes the breaker (the host's fields
-- go). While the breaker is open (until a time) more failures change nothing: the reply says how long it stays
-- open. Once a pause is over (openings > 0) the next page is the probe: its failure alone opens the breaker again.
-- Else failures add to the host's count in a row; at threshold the breaker opens. Each opening lasts pause_seconds
-- doubled per opening in a row, at most max_pause_seconds. Redis TIME is the clock.
-- KEYS[1] host_breakers (hash: HOST|failures count, HOST|until time s, HOST|openings count)
-- ARGV[1] host   ARGV[2] unreachable (count of pages)   ARGV[3] reached (count of pages)
-- ARGV[4] threshold (count of failures in a row)   ARGV[5] pause_seconds (s, the first opening)
-- ARGV[6] max_pause_seconds (s)   ARGV[7] keep_seconds (s, the hash's expiry after its last change)
-- Returns {state (closed, opened or open), open_seconds (s left open, 0 when closed), openings (count in a row)}
local now = server_now()
local host = ARGV[1]
local unreachable, reached = tonumber(ARGV[2]), tonumber(ARGV[3])
local f_failures, f_until, f_openings = host .. '|failures', host .. '|until', host .. '|openings'
if reached > 0 then
  redis.call('HDEL', KEYS[1], f_failures, f_until, f_openings)
  return {'closed', '0', 0}
end
local openings = tonumber(redis.call('HGET', KEYS[1], f_openings) or '0')
if unreachable <= 0 then
  return {'closed', '0', openings}
end
local open_until = tonumber(redis.call('HGET', KEYS[1], f_until) or '0')
if open_until > now then
  return {'open', string.format('%.3f', open_until - now), openings}
end
local failures = redis.call('HINCRBY', KEYS[1], f_failures, unreachable)
local state, open_for = 'closed', 0
if failures >= tonumber(ARGV[4]) or openings > 0 then
  openings = redis.call('HINCRBY', KEYS[1], f_openings, 1)
  open_for = math.min(tonumber(ARGV[6]), tonumber(ARGV[5]) * 2 ^ (openings - 1))
  redis.call('HSET', KEYS[1], f_until, string.format('%.6f', now + open_for), f_failures, 0)
  state = 'opened'
end
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[7]) * 1000))
return {state, string.format('%.3f', open_for), openings}
