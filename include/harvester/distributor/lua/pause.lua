-- pause: Retry-After for a whole source (KEYS[1] is a string key) or one host (KEYS[1] is a hash, ARGV[3] the host).
-- A pause only ever extends: a shorter Retry-After never shortens a longer one. Both keys expire when
-- their longest pause is over, so host pauses never pile up.
-- KEYS[1] paused: the source's paused_until (string) or its host_paused (hash)
-- ARGV[1] seconds (s)   ARGV[2] now (s) or ""   ARGV[3] host, or "" for the whole source
-- Returns paused_until: the time (s) admission waits until.
local now = now_or_server(ARGV[2])
local until_time = now + tonumber(ARGV[1])
local host = ARGV[3]
local current
if host == '' then current = tonumber(redis.call('GET', KEYS[1]) or '0')
else current = tonumber(redis.call('HGET', KEYS[1], host) or '0') end
if until_time <= current then return string.format('%.6f', current) end
if host == '' then
  redis.call('SET', KEYS[1], string.format('%.6f', until_time), 'PX', math.ceil(tonumber(ARGV[1]) * 1000) + 1000)
else
  redis.call('HSET', KEYS[1], host, string.format('%.6f', until_time))
  local keep_ms = math.ceil(tonumber(ARGV[1]) * 1000) + 1000
  if redis.call('PTTL', KEYS[1]) < keep_ms then redis.call('PEXPIRE', KEYS[1], keep_ms) end
end
return string.format('%.6f', until_time)
