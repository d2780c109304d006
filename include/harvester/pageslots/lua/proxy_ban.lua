-- proxy_ban: a host blocked us through one proxy (a 401, 403 or 429, or a block page): proxy_choose puts that proxy
-- after the others for this host until the ban ends, and the proxy's ban count grows. The bans hash expires as a
-- whole ban_seconds after the last ban, so it never outgrows the hosts that block now. Times: Redis TIME (s).
-- KEYS[1] proxy_health (hash, see PageSlotKeys.proxy_health)   KEYS[2] proxy_bans (hash, PageSlotKeys.proxy_bans)
-- ARGV[1] proxy (connection id)   ARGV[2] host (the site host)   ARGV[3] ban_seconds (s)
-- ARGV[4..] proxies (the pool's connection ids)
-- Returns {banned_until (Redis time, s), welcome (proxies of the pool the host has not banned and not out)}
local health, bans = KEYS[1], KEYS[2]
local proxy, host, seconds = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = server_now()
local banned_until = now + seconds
redis.call('HSET', bans, proxy .. '|' .. host, fmt(banned_until))
redis.call('EXPIRE', bans, math.ceil(seconds))
redis.call('HINCRBY', health, proxy .. '|bans', 1)
local welcome = 0
for index = 4, #ARGV do
  local other = ARGV[index]
  local until_ban = tonumber(redis.call('HGET', bans, other .. '|' .. host) or '0')
  local out_until = tonumber(redis.call('HGET', health, other .. '|out_until') or '0')
  if until_ban <= now and out_until <= now then welcome = welcome + 1 end
end
return {fmt(banned_until), welcome}
