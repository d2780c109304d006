-- proxy_choose: the proxies of a country's pool to try, in order, for one connection: those not out
-- (backed off), rotated by a shared turn so the pool's traffic spreads; when every proxy is out, the one
-- soonest back alone (a probe: its success brings it back, its failure backs it off longer). Times: Redis TIME (s).
-- KEYS[1] proxy_health (hash, see PageSlotKeys.proxy_health)
-- ARGV[1..] proxies (connection ids, the pool's order)
-- Returns {chosen...} (connection ids, first to try first)
local health = KEYS[1]
local now = server_now()
local usable, soonest, soonest_at = {}, nil, nil
for _, proxy in ipairs(ARGV) do
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
local chosen = {}
for index = 1, #usable do
  chosen[index] = usable[((turn + index - 2) % #usable) + 1]
end
return chosen
