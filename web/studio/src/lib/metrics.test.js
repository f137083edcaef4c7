import { expect, test } from 'vitest';
import { formatValue, histogramBars, histogramQuantile, hitRate } from './metrics.js';

const buckets = { 0.01: 2, 0.1: 6, 1: 10, '+Inf': 10 };

test('histogramQuantile interpolates within the bucket', () => {
  expect(histogramQuantile(buckets, 0.5)).toBeCloseTo(0.01 + 0.09 * (3 / 4));
  expect(histogramQuantile(buckets, 0.1)).toBeCloseTo(0.005);
  expect(histogramQuantile({ 1: 0, '+Inf': 0 }, 0.5)).toBeNull();
  expect(histogramQuantile({ 1: 0, '+Inf': 4 }, 0.5)).toBe(1);
});

test('histogramBars un-accumulates the buckets', () => {
  expect(histogramBars(buckets).map((b) => b.count)).toEqual([2, 4, 4, 0]);
});

test('formatValue picks units', () => {
  expect(formatValue(2e11, 'FLOP/s')).toBe('200 GFLOP/s');
  expect(formatValue(0.0021, 's')).toBe('2.10 ms');
  expect(formatValue(null)).toBe('–');
});

test('hitRate is a rounded percentage, a dash before any query', () => {
  expect(hitRate(32, 80)).toBe('40%');
  expect(hitRate(0, 0)).toBe('–');
  expect(hitRate(undefined, undefined)).toBe('–');
});
