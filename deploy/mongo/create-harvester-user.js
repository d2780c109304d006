// Run by the mongo image once, when its data volume is first initialised (/docker-entrypoint-initdb.d):
// the application user every Harvester process connects as. It can read and write the harvester
// database and nothing else; the root account stays with the mongo service.
const user = process.env.HARVESTER_MONGO_USER || "harvester";
const password = process.env.HARVESTER_MONGO_PASSWORD;
if (!password) {
  throw new Error("HARVESTER_MONGO_PASSWORD is not set: the application user cannot be created");
}
db.getSiblingDB("harvester").createUser({
  user: user,
  pwd: password,
  roles: [{ role: "readWrite", db: "harvester" }],
});
