-- archived_digests: a Bloom filter of a source's archived payload digests (harvester.storage.archive_digests):
-- every digest given is marked archived, and the reply says which of them were (maybe) archived before. A
-- digest's positions: its first two 32-bit words a and b (b made odd), bit 1 + (a + i * b) mod (bits - 1) for
-- i = 0..hashes-1 (below 2^53: exact in Lua's numbers). Bit 0 says the filter holds the whole index. The digests
-- are appended to the log the processes' copies of the filter read (archived_digests_sync.lua) unless keep_seconds
-- is 0 (a build from the index: the copies load the bitmap once it is built).
-- KEYS[1] archived_digests (string: the bitmap)   KEYS[2] archived_digests_log (stream: field d, digests' hex)
-- ARGV[1] bits (count of the filter's bits)   ARGV[2] hashes (count of bits a digest sets)
-- ARGV[3] digests (the SHA-1s in hex, 40 characters each, concatenated)
-- ARGV[4] mark_built ("1": set bit 0 once the digests are in: a build from the index has put them all)
-- ARGV[5] keep_seconds (how long log entries stay; 0: the digests are not logged)
-- Returns {built (1 when bit 0 was set before this call), seen (one character per digest: "1" maybe archived)}
local span = tonumber(ARGV[1]) - 1
local hashes = tonumber(ARGV[2])
local digests = ARGV[3]
local built = redis.call('GETBIT', KEYS[1], 0)
local seen = {}
for start = 1, #digests - 39, 40 do
  local a = tonumber(string.sub(digests, start, start + 7), 16)
  local b = tonumber(string.sub(digests, start + 8, start + 15), 16)
  if b % 2 == 0 then b = b + 1 end
  local all = '1'
  for i = 0, hashes - 1 do
    if redis.call('SETBIT', KEYS[1], 1 + (a + i * b) % span, 1) == 0 then all = '0' end
  end
  seen[#seen + 1] = all
end
if ARGV[4] == '1' then
  redis.call('SETBIT', KEYS[1], 0, 1)
end
local keep = tonumber(ARGV[5])
if keep > 0 and #digests > 0 then
  local now = redis.call('TIME')
  local oldest = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - keep * 1000
  redis.call('XADD', KEYS[2], 'MINID', '~', string.format('%d', oldest), '*', 'd', digests)
end
return {built, table.concat(seen)}
