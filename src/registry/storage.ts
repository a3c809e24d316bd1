// Where the registry keeps content and uploads: the backend that goes with the store.
import { FileBlobStore, type BlobStore } from './blobs.js';
import { BlobCache } from './cache.js';
import { openPostgresRegistry } from './postgres.js';
import { FileUploads, type UploadSessions } from './uploads.js';

export interface RegistryStorage {
  blobs: BlobStore;
  uploads: UploadSessions;
}

export interface RegistrySettings {
  databaseUrl?: string;
  dataDir: string;
  registryMaxBlobBytes: number;
  registryCacheBytes: number;
  registryMaxBytesPerOrg: number;
  registryMaxUploads: number;
  registryUploadIdleMs: number;
}

/** Rows in PostgreSQL when the store is there (every process on the database serves them), else files beside SQLite. */
export function openRegistry(options: RegistrySettings): RegistryStorage {
  const limits = { maxBlobBytes: options.registryMaxBlobBytes, maxOrgBytes: options.registryMaxBytesPerOrg, maxUploads: options.registryMaxUploads, idleMs: options.registryUploadIdleMs };
  if (options.databaseUrl && /^postgres(ql)?:\/\//.test(options.databaseUrl)) {
    // Content read from PostgreSQL is also kept on local disk, up to the bound (files beside SQLite need no such copy).
    const cache = options.registryCacheBytes > 0 ? new BlobCache(options.dataDir, options.registryCacheBytes) : undefined;
    return openPostgresRegistry(options.databaseUrl, limits, cache);
  }
  const blobs = new FileBlobStore(options.dataDir);
  return { blobs, uploads: new FileUploads(options.dataDir, limits, blobs) };
}

export async function closeRegistry(storage: RegistryStorage): Promise<void> {
  await storage.uploads.close();
  await storage.blobs.close();
}
