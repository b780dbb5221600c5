(function(){
'use strict';
// The live part of every page: the server pushes what changed (server-sent events) and this
// recolours racks, adds events, timeline entries and findings in place. Text goes in with
// textContent only: nothing the server sends is parsed as HTML.
const body=document.body;
let seq=Number(body.dataset.seq);
const rackPage=body.dataset.rackPage||null;
const status=document.getElementById('live-status');
function el(tag,cls,text){const e=document.createElement(tag);if(cls)e.className=cls;
 if(text!==undefined&&text!==null)e.textContent=String(text);return e;}
function setState(node,cls){for(const c of Array.from(node.classList)){
 if(c.startsWith('s-'))node.classList.remove(c);}node.classList.add(cls);}
function badge(state,cls){return el('span','badge '+cls,state||'no state');}
function updateRack(t){
 for(const node of document.querySelectorAll('[data-rack="'+CSS.escape(t.id)+'"]')){
  const moved=node.dataset.state!==t.state;
  setState(node,t.cls);node.dataset.state=t.state;node.dataset.findings=t.findings;
  node.dataset.usable=t.usable;
  node.title=t.id+': '+t.label+' ('+t.meaning+'); '+t.usable+' of '+t.gpus+' GPUs usable';
  const st=node.querySelector('.st');if(st)st.textContent=(node.classList.contains('chip')?' ':'')+t.label;
  if(moved&&node.classList.contains('chip'))node.classList.add('moved');
  const g=node.querySelector('.gpus');if(g)g.textContent=t.usable+'/'+t.gpus+' GPUs usable';
  const bar=node.querySelector('.ubar i');if(bar)bar.style.width=t.pct+'%';
  let f=node.querySelector('.f');
  if(node.classList.contains('rack')){
   if(t.findings&&!f){f=el('span','f');node.appendChild(f);}
   if(f){if(t.findings)f.textContent=t.findings+(t.findings===1?' finding':' findings');else f.remove();}
  }
 }
 if(rackPage===t.id){const s=document.getElementById('rack-state');if(s)s.textContent=t.label;}
}
function eventItem(e){
 const li=el('li','new');li.dataset.seq=e.seq;li.dataset.kind=e.kind;li.dataset.component=e.component;
 li.append(el('span','when',e.time),el('code',null,e.component),' ');
 if(e.kind==='lifecycle.transition'){li.append(badge(e.from,e.from_cls),' → ',badge(e.to,e.to_cls));}
 else{li.append(e.text);}
 if(e.actor){li.append(' ',el('span','muted','by '+e.actor));}
 if(e.reason){li.append(': '+e.reason);}
 return li;
}
function addEvent(e){
 const list=document.getElementById('live-events');
 if(list&&!list.querySelector('li[data-seq="'+e.seq+'"]')){
  list.prepend(eventItem(e));while(list.children.length>50)list.lastElementChild.remove();}
 const tl=document.getElementById(e.component===rackPage?'timeline':'tray-timeline');
 if(tl&&e.kind==='lifecycle.transition'&&!tl.querySelector('li[data-seq="'+e.seq+'"]')){
  tl.append(eventItem(e));const n=document.getElementById('tray-moves-count');
  if(n&&e.component!==rackPage)n.textContent=tl.children.length;}
 if(e.kind==='lifecycle.transition'){
  const row=document.querySelector('tr[data-tray="'+CSS.escape(e.component)+'"]');
  if(row){row.dataset.state=e.to||'';const c=row.querySelector('.tstate');
   if(c){c.replaceChildren(badge(e.to,e.to_cls));}}
 }
}
function addFinding(f){
 const tbody=document.querySelector('#findings tbody');
 if(!tbody||tbody.querySelector('tr[data-seq="'+f.seq+'"]'))return;
 const tr=el('tr','new');tr.dataset.seq=f.seq;tr.dataset.component=f.component;
 const comp=el('td');
 if(f.rack){const a=el('a',null,f.component);a.href='/racks/'+f.rack;comp.append(a);}else{comp.textContent=f.component;}
 const basis=el('td');basis.append(el('span','basis '+f.basis_cls,f.basis_label));
 const ev=el('td','evidence',f.repeats);
 if(f.detail){const d=el('details');d.append(el('summary',null,'more evidence'),el('div','detail',f.detail));ev.append(d);}
 tr.append(comp,el('td',null,f.kind),el('td',null,f.stage),el('td',null,f.verdict),
  el('td','measured',f.measured),el('td','expected',f.expected),el('td','unit',f.unit),basis,
  el('td','num confidence',f.confidence),ev);
 tbody.prepend(tr);
}
function apply(d){
 for(const t of Object.values(d.racks||{}))updateRack(t);
 for(const e of d.events||[])addEvent(e);
 for(const f of d.findings||[])addFinding(f);
 const n=document.getElementById('findings-count');
 if(n&&d.findings_total!==undefined&&d.findings_total!==null)n.textContent=d.findings_total;
 else if(n&&d.findings&&d.findings.length)n.textContent=document.querySelectorAll('#findings tbody tr').length;
 seq=d.seq;document.getElementById('seq').textContent=d.seq;
 document.dispatchEvent(new CustomEvent('rackscale:changed',{detail:d}));
}
// A group link opens its folded group.
function openTarget(){const id=decodeURIComponent(location.hash.slice(1));
 const t=id&&document.getElementById(id);if(t&&t.tagName==='DETAILS')t.open=true;}
window.addEventListener('hashchange',openTarget);openTarget();
if(!window.EventSource){status.textContent='live updates: not supported by this browser';return;}
// The browser reconnects a stream that ended by itself; one the server refused (429/503: too
// many streams, with Retry-After) or lost is closed for good, so it is opened again here,
// from the last seq applied, after a wait that doubles up to a minute (with jitter, so tabs
// do not return together).
let wait=2000;
function connect(){
 let url=body.dataset.stream+'?after='+seq;
 if(rackPage)url+='&rack='+encodeURIComponent(rackPage);
 const es=new EventSource(url);
 es.addEventListener('open',function(){wait=2000;status.textContent='live updates: connected';});
 es.addEventListener('error',function(){
  if(es.readyState!==EventSource.CLOSED){status.textContent='live updates: reconnecting';return;}
  es.close();
  const ms=Math.round(wait*(0.75+Math.random()/2));wait=Math.min(wait*2,60000);
  status.textContent='live updates: retrying in '+Math.round(ms/1000)+' s';
  setTimeout(connect,ms);
 });
 es.addEventListener('change',function(ev){try{apply(JSON.parse(ev.data));}catch(err){
  status.textContent='live updates: a message could not be read ('+err+')';}});
}
connect();
})();
