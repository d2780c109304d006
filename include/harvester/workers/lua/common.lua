-- Shared helpers, prepended to every script of this folder when it is registered (see scripts.py).
-- Units: every time is seconds since the Unix epoch as a float; every duration is seconds.

-- The Redis server clock, so every worker on every machine agrees on one clock.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
