// raftsql loaded into better-sqlite3, from a process of its own: the node
// runs in another process (the daemon, raftsql-node, or any host that
// called raft_start on the same database file), and raftsql's functions
// called here go to it through its socket (README "From other processes").
//
// Usage: node example.js DATABASE [RAFTSQL_SO]
//   DATABASE    the database file a node of this machine serves
//   RAFTSQL_SO  the loadable extension (default: ../../build/raftsql.so)
//
// What works in better-sqlite3 (README "From Node.js"): raft_exec,
// raft_query and the other functions, plain reads and raft_barrier().
// Not plain SQL writes: better-sqlite3's SQLite has no pre-update hook,
// so they are refused with the reason in raft_last_error(). Nor
// raft_start: its SQLite has no progress handler, which a node needs.

'use strict';

const path = require('path');
const Database = require('better-sqlite3');

// raftsql's result codes (ext/raftsql.h), which better-sqlite3 reports as
// err.code 'UNKNOWN_SQLITE_ERROR_<number>'; SQLite's own keep their names.
const RAFTSQL_CODES = {
  25861: 'RAFTSQL_NOT_APPLIED',
  26117: 'RAFTSQL_BUSY',
  26373: 'RAFTSQL_STALE',
  26629: 'RAFTSQL_DIVERGED',
  26893: 'RAFTSQL_FULL',
  27154: 'RAFTSQL_TOOBIG',
  27393: 'RAFTSQL_UNKNOWN',
  27657: 'RAFTSQL_INTERRUPTED',
  27913: 'RAFTSQL_INTERRUPTED_UNKNOWN',
  28161: 'RAFTSQL_INVALID',
  28430: 'RAFTSQL_NO_NODE',
  28673: 'RAFTSQL_REMOVED',
  28951: 'RAFTSQL_REFUSED',
};

// codeName gives the name of the result code of better-sqlite3's error
// @err: RAFTSQL_* for raftsql's, else SQLite's (err.code).
function codeName(err) {
  const m = /^UNKNOWN_SQLITE_ERROR_(\d+)$/.exec(err.code || '');
  return (m && RAFTSQL_CODES[m[1]]) || err.code;
}

function main(argv) {
  if (argv.length < 1 || argv.length > 2) {
    console.error('usage: node example.js DATABASE [RAFTSQL_SO]');
    return 2;
  }
  const so = argv[1] || path.join(__dirname, '..', '..', 'build', 'raftsql.so');
  const db = new Database(argv[0], { fileMustExist: true, timeout: 5000 });
  db.loadExtension(so);
  // one: the single value of a statement (a raft_* function's answer).
  const one = (sql, ...params) => db.prepare(sql).pluck().get(...params);

  // Writes go through the cluster; each returns once applied on this node.
  one("SELECT raft_exec('CREATE TABLE IF NOT EXISTS kv(k TEXT PRIMARY KEY, v)')");
  const n = one("SELECT raft_exec('INSERT OR REPLACE INTO kv VALUES(?, ?)', ?, ?)",
                'from', 'node.js');
  console.log('raft_exec changed %d row', n);
  const q = JSON.parse(one(
    "SELECT raft_query('UPDATE kv SET v = upper(v) WHERE k = ? RETURNING v', ?)",
    'from'));
  console.log('raft_query returned %j', q.results[0].rows);

  // Reads are plain SQL; raft_barrier() makes the next ones linearizable.
  one('SELECT raft_barrier()');
  console.log('read %j', db.prepare('SELECT k, v FROM kv ORDER BY k').all());
  const st = JSON.parse(one('SELECT raft_status()'));
  console.log('node %d is %s, leader %d', st.id, st.role, st.leader);

  // Errors carry their code.
  try {
    one("SELECT raft_exec('INSERT INTO kv VALUES(?, 1)', 'from')");
  } catch (err) {
    console.log('duplicate key: %s: %s', codeName(err), err.message);
  }
  try {
    db.prepare("INSERT INTO kv VALUES('plain', 1)").run();
  } catch (err) {
    console.log('plain INSERT refused: %s: %s', codeName(err),
                one('SELECT raft_last_error()'));
  }
  try {
    one("SELECT raft_start('id=9')");
  } catch (err) {
    console.log('raft_start refused: %s', codeName(err));
  }
  db.close();
  return 0;
}

process.exitCode = main(process.argv.slice(2));
