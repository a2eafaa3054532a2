#!/bin/bash
set -euo pipefail
cd /app
cat > report.sql <<'SQL'
SELECT c.name AS category,
       COUNT(*) AS active_products,
       ROUND(AVG(p.price), 2) AS avg_price
FROM products AS p
JOIN categories AS c ON c.id = p.category_id
WHERE p.discontinued = 0
GROUP BY c.id, c.name
ORDER BY active_products DESC, category ASC;
SQL
sqlite3 shop.db < report.sql
