// The studio's REST API: JSON in and out, the API key from localStorage on every request, errors
// thrown with the server's message.
import { ref } from 'vue';

export const apiKey = ref(localStorage.getItem('studio.key') || '');

export function setKey(key) {
  apiKey.value = key;
  if (key) localStorage.setItem('studio.key', key);
  else localStorage.removeItem('studio.key');
}

export function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (apiKey.value) h.Authorization = `Bearer ${apiKey.value}`;
  return h;
}

export async function api(method, path, body) {
  const res = await fetch(`/api${path}`, {
    method,
    headers: headers(),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(data?.error?.message ?? `${method} ${path}: ${res.status}`);
  return data;
}

export const get = (path) => api('GET', path);
export const post = (path, body = {}) => api('POST', path, body);
export const patch = (path, body) => api('PATCH', path, body);
export const del = (path) => api('DELETE', path);
