// UI text in English and Chinese; the choice is kept in localStorage.
import { ref } from 'vue';

const text = {
  en: {
    title: 'Tessera Studio', overview: 'Overview', accelerators: 'Accelerators', models: 'Models',
    services: 'Services', chat: 'Chat', runs: 'Training runs', benchmarks: 'Benchmarks',
    apiKey: 'API key', login: 'Sign in', logout: 'Sign out', loginHint: 'Enter the key `tessera studio` printed (or --api-key) to change anything.',
    add: 'Add', register: 'Register', delete: 'Delete', refresh: 'Refresh', name: 'Name', path: 'Path',
    tokenizer: 'Tokenizer (optional)', format: 'Format', arch: 'Architecture', parameters: 'Parameters',
    dtype: 'Dtype', memory: 'Memory', brand: 'Brand', model: 'Model', bandwidth: 'Bandwidth',
    kvPerToken: 'KV cache / token', fullContext: 'Memory at full context', tokens: 'tokens',
    compute: 'Compute', measured: 'Measured (tessera bench hardware)', detect: 'Add this CPU',
    port: 'Port (0: any)', state: 'State', start: 'Start', stop: 'Stop', restart: 'Restart',
    logs: 'Logs', newService: 'New service', ttft: 'Time to first token', tbt: 'Time between tokens',
    kvBlocks: 'KV blocks used', queue: 'Waiting', running: 'Running', preemptions: 'Preemptions',
    prefixHits: 'Prefix cache hits',
    unresponsive: 'not answering /health', shutting_down: 'shutting down',
    newChat: 'New chat', send: 'Send', stopGen: 'Stop', temperature: 'Temperature', topP: 'Top p',
    maxTokens: 'Max tokens', system: 'System prompt', export: 'Export JSON', history: 'History',
    output: 'Output', outputText: 'Free text', outputJson: 'JSON object', outputSchema: 'JSON Schema',
    outputRegex: 'Regular expression', outputGrammar: 'Grammar (GBNF)',
    tokensPerS: 'tokens/s', service: 'Service', noService: 'Start a service first.',
    loss: 'Loss', lr: 'Learning rate', tokS: 'Tokens/s', samples: 'Samples', step: 'Step',
    importBench: 'Import JSON', compare: 'Compare', suite: 'Suite', date: 'Date', commit: 'Commit',
    figures: 'Figures', ratio: 'B / A', median: 'Median', counts: 'In this studio',
    conversations: 'Conversations', language: '中文', typeMessage: 'Type a message…', schema: 'Schema version', cores: 'CPU cores',
  },
  zh: {
    title: 'Tessera 工作室', overview: '概览', accelerators: '加速器', models: '模型', services: '服务',
    chat: '对话', runs: '训练任务', benchmarks: '基准测试', apiKey: 'API 密钥', login: '登录',
    logout: '退出', loginHint: '输入 `tessera studio` 打印的密钥（或 --api-key）后才能修改。',
    add: '添加', register: '注册', delete: '删除', refresh: '刷新', name: '名称', path: '路径',
    tokenizer: '分词器（可选）', format: '格式', arch: '架构', parameters: '参数量', dtype: '数据类型',
    memory: '内存', brand: '品牌', model: '型号', bandwidth: '带宽', compute: '算力',
    kvPerToken: '每词元 KV 缓存', fullContext: '满上下文内存', tokens: '词元',
    measured: '实测（tessera bench hardware）', detect: '添加本机 CPU', port: '端口（0：自动）',
    state: '状态', start: '启动', stop: '停止', restart: '重启', logs: '日志', newService: '新建服务',
    ttft: '首个词元延迟', tbt: '词元间隔', kvBlocks: '已用 KV 块', queue: '排队', running: '运行中',
    unresponsive: '/health 无响应', shutting_down: '正在关闭',
    preemptions: '抢占次数', prefixHits: '前缀缓存命中率', newChat: '新对话', send: '发送', stopGen: '停止', temperature: '温度',
    topP: 'Top p', maxTokens: '最大词元数', system: '系统提示词', export: '导出 JSON', history: '历史',
    output: '输出格式', outputText: '自由文本', outputJson: 'JSON 对象', outputSchema: 'JSON Schema',
    outputRegex: '正则表达式', outputGrammar: '语法（GBNF）',
    tokensPerS: '词元/秒', service: '服务', noService: '请先启动一个服务。', loss: '损失',
    lr: '学习率', tokS: '词元/秒', samples: '样例', step: '步', importBench: '导入 JSON',
    compare: '对比', suite: '套件', date: '日期', commit: '提交', figures: '指标', ratio: 'B / A',
    median: '中位数', counts: '工作室内容', language: 'English', typeMessage: '输入消息…',
    schema: '数据库版本', cores: 'CPU 核心', conversations: '对话记录',
  },
};

export const lang = ref(localStorage.getItem('studio.lang') || 'en');

export function t(key) {
  return text[lang.value][key] ?? text.en[key] ?? key;
}

export function toggleLang() {
  lang.value = lang.value === 'en' ? 'zh' : 'en';
  localStorage.setItem('studio.lang', lang.value);
}
