-- archived_digests_sync: a worker process's copy of a source's payload filter (harvester.storage.archive_digests)
-- brought up to date, once an interval instead of a call a batch. The digests this process marked in its copy
-- since its last sync are marked in the filter and appended to the log; the reply is what the process lacks:
-- the log's entries after its cursor (the other processes' digests since), or, when the log no longer holds
-- everything after the cursor (an entry after it trimmed, or the log dropped by the clean-up: when unsure, it
-- does not) or there is no cursor, the whole bitmap. Positions as in archived_digests.lua. Log entries older than keep_seconds (Redis TIME) are trimmed.
-- KEYS[1] archived_digests (string: the bitmap)   KEYS[2] archived_digests_log (stream: field d, digests' hex)
-- ARGV[1] bits (count of the filter's bits)   ARGV[2] hashes (count of bits a digest sets)
-- ARGV[3] digests (the SHA-1s in hex this process marked since its last sync, concatenated; may be empty)
-- ARGV[4] cursor (the last log entry this process holds; "" for none: the bitmap is sent)
-- ARGV[5] keep_seconds (how long log entries stay)
-- Returns {built (1 when bit 0 is set), kind ("log" or "bitmap"), cursor (the log's entry the reply reaches), data (the digests' hex after the cursor, or the bitmap)}
local span = tonumber(ARGV[1]) - 1
local hashes = tonumber(ARGV[2])
local digests = ARGV[3]
local cursor = ARGV[4]
for start = 1, #digests - 39, 40 do
  local a = tonumber(string.sub(digests, start, start + 7), 16)
  local b = tonumber(string.sub(digests, start + 8, start + 15), 16)
  if b % 2 == 0 then b = b + 1 end
  for i = 0, hashes - 1 do
    redis.call('SETBIT', KEYS[1], 1 + (a + i * b) % span, 1)
  end
end
local added = nil
if #digests > 0 then
  local now = redis.call('TIME')
  local oldest = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(ARGV[5]) * 1000
  added = redis.call('XADD', KEYS[2], 'MINID', '~', string.format('%d', oldest), '*', 'd', digests)
end
local built = redis.call('GETBIT', KEYS[1], 0)

-- entry ids are "<ms>-<seq>": compared as two numbers
local function before_or_at(left, right)
  local left_ms, left_seq = string.match(left, '^(%d+)-(%d+)$')
  local right_ms, right_seq = string.match(right, '^(%d+)-(%d+)$')
  left_ms, right_ms = tonumber(left_ms), tonumber(right_ms)
  return left_ms < right_ms or (left_ms == right_ms and tonumber(left_seq) <= tonumber(right_seq))
end

if cursor ~= '' then
  -- whether the log still holds every entry after the cursor: trimming drops the oldest entries only, so it does
  -- when its oldest entry is at or before the cursor, or, empty, when none came after the cursor
  local complete = false
  if redis.call('EXISTS', KEYS[2]) == 0 then
    complete = cursor == '0-0'  -- never written since the copy was loaded; else dropped (the clean-up)
  else
    local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
    if #first > 0 then
      complete = before_or_at(first[1][1], cursor)
    else
      local info = redis.call('XINFO', 'STREAM', KEYS[2])
      for i = 1, #info - 1, 2 do
        if info[i] == 'last-generated-id' then complete = before_or_at(info[i + 1], cursor) end
      end
    end
  end
  if complete then
    local entries = redis.call('XRANGE', KEYS[2], '(' .. cursor, '+')
    local parts = {}
    local last = cursor
    for _, entry in ipairs(entries) do
      last = entry[1]
      if entry[1] ~= added then  -- (this process's own digests are in its copy already)
        parts[#parts + 1] = entry[2][2]
      end
    end
    return {built, 'log', last, table.concat(parts)}
  end
end
local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
return {built, 'bitmap', #newest > 0 and newest[1][1] or '0-0', redis.call('GET', KEYS[1]) or ''}
