function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
function work() { let s = 0; for (let i = 0; i < 30; i++) s += fib(25); return s; }
const end = Date.now() + 1500;
let t = 0;
while (Date.now() < end) t += work();
console.log(t > 0);
