// Vite builds the studio into dist/, which the C++ build embeds (src/studio/CMakeLists.txt).
import { defineConfig } from 'vite';
import vue from '@vitejs/plugin-vue';

export default defineConfig({
  plugins: [vue()],
  build: { outDir: 'dist', chunkSizeWarningLimit: 4000, reportCompressedSize: false },
  test: { include: ['src/**/*.test.js'], environment: 'node' },
});
