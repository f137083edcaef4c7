// A list the page loads from the API, with an action wrapper that reports errors and reloads.
import { onMounted, onUnmounted, ref } from 'vue';
import { message } from 'ant-design-vue';
import { get } from '../api.js';

export function useResource(path, { poll = 0 } = {}) {
  const items = ref([]);
  const loading = ref(false);
  async function load() {
    loading.value = true;
    try {
      items.value = await get(typeof path === 'function' ? path() : path);
    } catch (e) {
      message.error(e.message);
    } finally {
      loading.value = false;
    }
  }
  // Runs fn (an API call), shows its error if any, then reloads.
  async function act(fn) {
    try {
      return await fn();
    } catch (e) {
      message.error(e.message);
    } finally {
      await load();
    }
  }
  let timer = null;
  onMounted(() => {
    load();
    if (poll) timer = setInterval(load, poll);
  });
  onUnmounted(() => clearInterval(timer));
  return { items, loading, load, act };
}
