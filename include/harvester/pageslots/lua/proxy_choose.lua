-- proxy_choose: the proxies of a country's pool to try, in order, for one connection or session: those not out
-- (backed off), rotated by a shared turn so the pool's traffic spreads; when every proxy is out, the one
-- soonest back alone (a probe: its success brings it back, its failure backs it off longer). A proxy the host
-- banned (proxy_ban) goes after those it did not, so a host that blocks one exit is tried through another
-- first; when the host banned every usable proxy they keep their turn (the host's own pause answers that).
-- Times: Redis TIME (s).
-- KEYS[1] proxy_health (hash, see PageSlotKeys.proxy_health)   KEYS[2] proxy_bans (hash, PageSlotKeys.proxy_bans)
-- ARGV[1] host (the site host the connection is for; '' for none)   ARGV[2..] proxies (connection ids, pool order)
-- Returns {chosen...} (connection ids, first to try first)
local health, bans = KEYS[1], KEYS[2]
local host = ARGV[1]
local now = server_now()
local usable, soonest, soonest_at = {}, nil, nil
for index = 2, #ARGV do
  local proxy = ARGV[index]
  local out_until = tonumber(redis.call('HGET', health, proxy .. '|out_until') or '0')
  if out_until <= now then
    table.insert(usable, proxy)
  elseif soonest_at == nil or out_until < soonest_at then
    soonest, soonest_at = proxy, out_until
  end
end
if #usable == 0 then
  if soonest == nil then return {} end
  return {soonest}
end
local turn = redis.call('HINCRBY', health, '#turn', 1)
local welcome, banned = {}, {}
for index = 1, #usable do
  local proxy = usable[((turn + index - 2) % #usable) + 1]
  local banned_until = 0
  if host ~= '' then banned_until = tonumber(redis.call('HGET', bans, proxy .. '|' .. host) or '0') end
  if banned_until > now then table.insert(banned, proxy) else table.insert(welcome, proxy) end
end
for _, proxy in ipairs(banned) do table.insert(welcome, proxy) end
return welcome
