/// <reference types="vitest/config" />
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// The build lands inside the Python package so that `gpufleet serve` serves it
// at / (see backend/gpufleet/api/static.py); the folder is gitignored and made
// by scripts/build-frontend.sh.
const backend = process.env.GPUFLEET_DEV_BACKEND ?? 'http://127.0.0.1:8000';

export default defineConfig({
  plugins: [react()],
  build: {
    outDir: '../backend/gpufleet/static',
    emptyOutDir: true,
    chunkSizeWarningLimit: 800,
  },
  server: {
    proxy: {
      '/api': { target: backend, ws: true, changeOrigin: false },
      '/healthz': backend,
    },
  },
  test: {
    environment: 'jsdom',
    setupFiles: ['./src/test/setup.ts'],
    include: ['src/**/*.test.{ts,tsx}'],
    css: false,
    // Per test; the waits inside are bounded by src/test/setup.ts (a loaded machine, not a hang).
    testTimeout: 60_000,
  },
});
